"""A spatial plan as a picture: the scheme of every layer, where data moves, and the scores."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tvm_hetero.viz import save_figure

COLOURS = {"InH": "tab:blue", "InW": "tab:cyan", "OutC": "tab:orange", "Grid": "tab:green",
           "Home": "tab:gray"}  # fmt: skip


def plot_spatial_schemes(
    plan, layers: int, title: str, path: str | Path, times_s: Mapping[str, float] | None = None
) -> Path:
    """Top: the model's layers coloured by the scheme of their segment; a black edge where a
    segment ends (T: tiles exchanged), none inside one (NT: the halo is computed instead).
    Bottom: the predicted (or measured) time of FlexPie and each baseline, with the paper's
    performance score (the best time over each one's).

    Parameters
    ----------
    plan : tvm_hetero.plan.spatial_plan.SpatialPlan
        A plan with its layer ranges.
    layers : int
        Layers of the model.
    title : str
        Figure title.
    path : str or Path
        Output PNG (its folder is created).
    times_s : mapping, optional
        Strategy name -> seconds, FlexPie's included.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 2 if times_s else 1
    size = (12, 1.8 + 0.3 * len(times_s or ()))
    ratios = {"height_ratios": [1, 2][:rows]}
    fig, axes = plt.subplots(rows, 1, figsize=size, squeeze=False, gridspec_kw=ratios)
    top = axes[0][0]
    seen = set()
    for (first, last), scheme in zip(plan.layers, plan.schemes, strict=True):
        label = None if scheme in seen else scheme
        seen.add(scheme)
        top.barh(0, last - first + 1, left=first, color=COLOURS[scheme], edgecolor="black",
                 lw=1.5, label=label)  # fmt: skip
        for inner in range(first + 1, last + 1):
            top.axvline(inner, color="white", lw=0.6, ls=":")
    top.set_xlim(0, layers)
    top.set_yticks([])
    top.set_xlabel("layer (black edge: tiles exchanged after it; dotted: halo computed instead)")
    top.legend(fontsize=7, ncol=5, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    top.set_title(f"{title}\n{len(plan.layers)} segments on {len(plan.devices)} devices",
                  fontsize=9)  # fmt: skip
    if times_s:
        bottom = axes[1][0]
        names = sorted(times_s, key=times_s.get)
        best = min(times_s.values())
        values = [times_s[n] * 1e3 for n in names]
        colours = ["tab:red" if n == plan.strategy else "tab:gray" for n in names]
        bottom.barh(range(len(names)), values, color=colours)
        for r, n in enumerate(names):
            bottom.text(values[r], r, f" score {best / times_s[n]:.2f}", va="center", fontsize=7)
        bottom.set_yticks(range(len(names)), names, fontsize=7)
        bottom.invert_yaxis()
        bottom.set_xlabel("ms per inference")
    fig.tight_layout()
    return save_figure(fig, path)
