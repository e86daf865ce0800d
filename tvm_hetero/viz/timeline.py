"""Device timeline of an operator assignment executed one operator at a time."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def plot_timeline(dcg, costs, assignment: Mapping[str, int], title: str, path: Path) -> Path:
    """One row per device (and one for copies): each operator a bar at its start time.

    Parameters
    ----------
    dcg : DCG
        The device-mapped graph.
    costs : Costs
        Node and DA-edge costs (seconds).
    assignment : Mapping[str, int]
        Operator -> device index.
    title : str
        Figure title.
    path : Path
        Output PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    preds: dict[str, list] = {}
    for e in dcg.edges:
        preds.setdefault(e.dst, []).append(e)
    rows = len(dcg.devices)
    fig, ax = plt.subplots(figsize=(12, 0.8 * (rows + 1) + 1.2))
    t = 0.0
    for op in dcg.ops:
        d = assignment[op]
        for e in preds.get(op, []):
            key = dcg.da_key(e, dcg.device_of(e.src, assignment), d)
            if key is not None:
                ax.barh(
                    rows,
                    costs.edge[key] * 1e3,
                    left=t * 1e3,
                    color="tab:gray",
                    edgecolor="black",
                    linewidth=0.3,
                )
                t += costs.edge[key]
        cost = costs.node[op][d]
        ax.barh(
            rows - 1 - d, cost * 1e3, left=t * 1e3, color=f"C{d}", edgecolor="black", linewidth=0.3
        )
        t += cost
    ax.set_yticks(range(rows + 1), [*reversed(dcg.devices), "copies"])
    ax.set_xlabel(f"time (ms); total {t * 1e3:.3f} ms, one operator at a time")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
