"""A pipeline plan as a picture: which layers each device takes, and each stage's period."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tvm_hetero.viz import save_figure


def plot_pipeline_stages(
    plan, layer_labels: Sequence[str], title: str, path: str | Path,
    measured_period_s: float | None = None,
) -> Path:  # fmt: skip
    """Top: the layers along the model, each stage's run of them coloured by its device.
    Bottom: each stage's predicted compute and send (the period is the larger; the pipeline's
    is the slowest stage's, dashed), and the measured period when given (dotted).

    Parameters
    ----------
    plan : tvm_hetero.plan.pipeline_plan.PipelinePlan
        A plan with its layers and predicted costs.
    layer_labels : sequence of str
        A name per layer (its main operator).
    title : str
        Figure title.
    path : str or Path
        Output PNG (its folder is created).
    measured_period_s : float, optional
        The period a pipelined run measured.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = len(plan.stages)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(12, 2.4 + 0.45 * stages), gridspec_kw={"height_ratios": [1, 2]}
    )
    palette = plt.get_cmap("tab10")
    for k, (first, last) in enumerate(plan.layers):
        top.barh(0, last - first + 1, left=first, color=palette(k % 10), edgecolor="black")
        top.text((first + last + 1) / 2, 0, plan.devices[k], ha="center", va="center", fontsize=7)
    top.set_xlim(0, len(layer_labels))
    top.set_yticks([])
    ticks = range(0, len(layer_labels), max(1, len(layer_labels) // 24))
    top.set_xticks([t + 0.5 for t in ticks], [layer_labels[t] for t in ticks], rotation=60)
    top.tick_params(axis="x", labelsize=6)
    top.set_title(f"{title}\nlayers per stage ({len(layer_labels)} layers)", fontsize=9)
    if plan.compute_s:
        rows = range(stages)
        compute = [t * 1e3 for t in plan.compute_s]
        send = [t * 1e3 for t in plan.send_s]
        bottom.barh([r - 0.2 for r in rows], compute, height=0.4, color="tab:blue", label="compute")
        bottom.barh([r + 0.2 for r in rows], send, height=0.4, color="tab:orange", label="send")
        period = (plan.period_s or 0) * 1e3
        bottom.axvline(period, color="black", ls="--", lw=1, label=f"period {period:.3f} ms")
        if measured_period_s is not None:
            bottom.axvline(
                measured_period_s * 1e3, color="tab:red", ls=":", lw=1.5,
                label=f"measured {measured_period_s * 1e3:.3f} ms",
            )  # fmt: skip
        names = [f"{k}: {d}" for k, d in enumerate(plan.devices)]
        bottom.set_yticks(list(rows), names)
        bottom.invert_yaxis()
        bottom.set_xlabel("predicted ms per microbatch")
        bottom.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)
