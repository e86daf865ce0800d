"""DUET's predicted schedule: each subgraph a bar on its device's lane."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tvm_hetero.viz import save_figure


def plot_subgraph_schedule(
    slots: Sequence, labels: Sequence[str], devices: Sequence[str], title: str, path: str | Path
) -> Path:
    """One lane per device; each subgraph a bar from its predicted start to its end.

    Parameters
    ----------
    slots : sequence of tvm_hetero.plan.duet.Slot
        The predicted schedule (:func:`tvm_hetero.plan.duet.schedule`).
    labels : sequence of str
        A name per subgraph.
    devices : sequence of str
        Device names by index.
    title : str
        Figure title.
    path : str or Path
        Output PNG (its folder is created).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 0.8 * len(devices) + 1.6))
    total = max((s.end_s for s in slots), default=0.0)
    for s in slots:
        width = (s.end_s - s.start_s) * 1e3
        ax.barh(s.device, width, left=s.start_s * 1e3, color=f"C{s.subgraph % 10}",
                edgecolor="black", lw=0.3)  # fmt: skip
        if width > total * 1e3 / 20:
            ax.text(s.start_s * 1e3 + width / 2, s.device, labels[s.subgraph], ha="center",
                    va="center", fontsize=6)  # fmt: skip
    ax.set_yticks(range(len(devices)), devices)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms), predicted from the subgraphs' measured costs")
    ax.set_title(f"{title}\npredicted {total * 1e3:.3f} ms", fontsize=9)
    return save_figure(fig, path)
