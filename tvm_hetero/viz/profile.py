"""Profile charts: per-operator time bars per device, and fitted transfer curves."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_profile(graph, times, fits, title: str, path: Path, top: int = 15) -> Path:
    """Bars of the ``top`` slowest operators on each device; copy time against size with fits.

    Parameters
    ----------
    graph : OpGraph
        The model's graph.
    times : dict[str, dict[str, ProfileRecord]]
        Device name -> operator id -> record.
    fits : dict[tuple[str, str], tuple[list, list, TransferFit]]
        ``(src, dst)`` -> sizes, measured seconds and the fit.
    title : str
        Figure title.
    path : Path
        Output PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devices = list(times)
    first = devices[0]
    nodes = sorted(graph.nodes, key=lambda n: -times[first][n.node_id].median_s)[:top][::-1]
    panels = 2 if fits else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 0.4 * len(nodes) + 2), squeeze=False)
    ax = axes[0][0]
    y = np.arange(len(nodes))
    height = 0.8 / len(devices)
    for k, d in enumerate(devices):
        ax.barh(
            y + k * height, [times[d][n.node_id].median_s * 1e6 for n in nodes], height, label=d
        )
    ax.set_yticks(
        y + 0.4 - height / 2, [f"{n.node_id} ({n.op.removeprefix('relax.')})" for n in nodes]
    )
    ax.set_xlabel("median time (us)")
    ax.legend()
    if fits:
        ax = axes[0][1]
        for (src, dst), (sizes, seconds, fit) in fits.items():
            line = ax.loglog(sizes, np.array(seconds) * 1e6, "o", label=f"{src} -> {dst}")[0]
            grid = np.geomspace(min(sizes), max(sizes), 50)
            ax.loglog(grid, [fit.seconds(s) * 1e6 for s in grid], "-", color=line.get_color())
        ax.set_xlabel("bytes")
        ax.set_ylabel("copy time (us)")
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
