"""Census chart: where a model's FLOPs and bytes go, per operator type."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_census(
    rows: Sequence[dict[str, Any]], title: str, path: str | Path, top: int = 12
) -> Path:
    """Horizontal bars of FLOP share and bytes moved for the ``top`` op types.

    Parameters
    ----------
    rows : Sequence[dict]
        :meth:`OpGraph.census` rows.
    title : str
        Figure title.
    path : str or Path
        Output PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(rows)[:top][::-1]
    names = [r["op"].removeprefix("relax.") + f" (x{r['count']})" for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.5), sharey=True)
    ax1.barh(names, [100 * r["flops_share"] for r in rows], color="tab:blue")
    ax1.set_xlabel("share of FLOPs (%)")
    ax2.barh(names, [(r["bytes"] or 0) / 2**20 for r in rows], color="tab:orange")
    ax2.set_xlabel("bytes read + written (MiB)")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
