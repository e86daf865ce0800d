"""The measured timeline of one run: which unit or copy ran on which worker, and when."""

from __future__ import annotations

from pathlib import Path

from tvm_hetero.viz import save_figure


def plot_run_timeline(timeline, title: str, path: str | Path) -> Path:
    """One row per worker; each unit (blue) and copy (orange) a bar from its start to its end;
    in a pipelined run each microbatch's units have a colour of their own and say ``mbK``; the
    part of a unit spent waiting on its worker for an input still arriving is hatched white.

    Parameters
    ----------
    timeline : tvm_hetero.runtime.executor.Timeline
        What :class:`~tvm_hetero.runtime.executor.Executor` recorded (measured, not predicted).
    title : str
        Figure title.
    path : str or Path
        Output PNG (its folder is created).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers = list(dict.fromkeys(e.worker for e in timeline.events))
    fig, ax = plt.subplots(figsize=(12, 0.7 * len(workers) + 1.6))
    colors = {"unit": "tab:blue", "copy": "tab:orange"}
    pipelined = len({e.microbatch for e in timeline.events}) > 1
    palette = plt.get_cmap("tab20")
    for e in timeline.events:
        row = workers.index(e.worker)
        width = (e.end_s - e.start_s) * 1e3
        color = palette(e.microbatch % 20) if pipelined and e.kind == "unit" else colors[e.kind]
        ax.barh(row, width, left=e.start_s * 1e3, color=color, edgecolor="black", lw=0.3)
        if e.waited_s > 0:
            ax.barh(row, e.waited_s * 1e3, left=e.start_s * 1e3, color="white", hatch="///",
                    edgecolor="grey", lw=0.3)  # fmt: skip
        if width > timeline.total_s * 1e3 / 25:
            label = f"mb{e.microbatch}" if pipelined else e.step
            ax.text(e.start_s * 1e3 + width / 2, row, label, ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(workers)), workers)
    ax.invert_yaxis()
    ax.set_xlabel("time since the run started (ms), measured")
    total = timeline.total_s
    busy = ", ".join(f"{w} {100 * timeline.busy_s(w) / total:.0f}% busy" for w in workers)
    ax.set_title(f"{title}\n{timeline.total_s * 1e3:.3f} ms; {busy}", fontsize=9)
    return save_figure(fig, path)
