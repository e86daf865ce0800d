"""What ``optimize`` found, shown: the candidates' table, the verdict in one line, a Markdown
report and a chart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tvm_hetero.optimize.search import Entry, OptimizeResult
from tvm_hetero.records import cpu_model
from tvm_hetero.viz.tables import table

TIE = 1.03
"""Two medians closer than this ratio are a tie on a shared host (runs of one model moved by up
to 20 % between searches)."""

SHORT = {"kept": "kept", "timed": "timed"}
"""Status words shown as they are; any other status is shortened to its first words."""


def _ms(seconds: float | None) -> float | str:
    return "-" if seconds is None else seconds * 1e3


def _short(status: str) -> str:
    return SHORT.get(status, status.split(":")[0])


def _versus(entry: Entry, single: Entry | None) -> str:
    if single is None or not entry.samples_s:
        return "-"
    return f"{single.p50_s / entry.p50_s:.2f}x"


def rows(result: OptimizeResult) -> list[list[Any]]:
    """One row per candidate: name, predicted, p50, p99 (ms), speed against the best single
    device, and its status in a word."""
    single = result.best("single")
    return [
        [
            e.name,
            _ms(e.predicted_s),
            _ms(e.p50_s),
            _ms(e.p99_s),
            _versus(e, single),
            _short(e.status),
        ]
        for e in result.entries
    ]


COLUMNS = ["candidate", "pred ms", "p50 ms", "p99 ms", "vs 1 dev", "status"]


def candidates_table(result: OptimizeResult) -> Any:
    """The candidates as a rich table (fits 80 columns)."""
    unit = "per request, requests in flight" if result.objective == "throughput" else "one request"
    return table(f"{result.model}: candidates ({unit})", COLUMNS, rows(result))


def left_out(result: OptimizeResult) -> list[tuple[str, str]]:
    """Each candidate that was not timed, and why: ``(name, status)``."""
    return [(e.name, e.status) for e in result.entries if e.status not in SHORT]


def reasons(result: OptimizeResult) -> list[str]:
    """Why each candidate that was not timed was left out, one line each."""
    return [f"{name}: {why}" for name, why in left_out(result)]


def verdict(result: OptimizeResult) -> str:
    """One line: what was kept and how much faster than the best single device and ONNX
    Runtime that is; or that one device is fastest here, and why."""
    kept, single, peer = result.kept, result.best("single"), result.best("peer")
    said = f"kept {kept.name} ({kept.p50_s * 1e3:.3f} ms p50)"
    if kept.kind == "single":
        plans = [e for e in result.entries if e.kind == "strategy" and e.samples_s]
        rival = min(plans, key=lambda e: e.p50_s, default=None)
        if rival is None:
            why = "no plan over several devices was timed (see why above)"
        else:
            slower = rival.p50_s / kept.p50_s
            why = (
                f"the best plan over several, {rival.name}, ran level with it ({slower:.2f}x): "
                "spreading gains nothing here"
                if slower < TIE
                else f"the best plan over several, {rival.name}, ran {slower:.2f}x slower: the "
                "copies and handoffs between devices cost more than the work they share"
            )
        said = f"one device is fastest here: {said}; {why}"
    else:
        gain = single.p50_s / kept.p50_s
        said += f", {gain:.2f}x the speed of the best single device ({single.name})"
    if peer is not None:
        ratio = peer.p50_s / kept.p50_s
        where = peer.devices[0]
        if ratio >= 1:
            said += (
                f"; {ratio:.2f}x the speed of ONNX Runtime on {where} ({peer.p50_s * 1e3:.3f} ms)"
            )
        else:
            said += (
                f"; ONNX Runtime on {where} is {1 / ratio:.2f}x faster ({peer.p50_s * 1e3:.3f} "
                "ms): we are slower than the peer here"
            )
    return said


def markdown(result: OptimizeResult, devices: list[str]) -> str:
    """The report: host, devices, objective, every candidate, why some were not timed, the
    verdict."""
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join(
        "| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row) + " |\n"
        for row in rows(result)
    )
    why = "".join(f"- {line}\n" for line in reasons(result)) or "- every candidate was timed\n"
    return (
        f"# tvm-hetero optimize: {result.model}\n\n"
        f"- host: {cpu_model()}, {os.cpu_count()} cores\n"
        f"- devices: {', '.join(devices)}\n"
        f"- objective: {result.objective}; search took {result.seconds:.1f} s"
        f"{took(result)}\n\n"
        f"{head}{body}\n## Not timed\n\n{why}\n## Verdict\n\n{verdict(result)}\n"
    )


def took(result: OptimizeResult) -> str:
    """Where the search's time went, what its budget cut short and by how much it overran
    the budget, ``" (each device alone 3 s, planning 12 s, compiling 30 s, timing 8 s; the
    budget's end: timed 8 of 20 runs each; 10 s over its 50 s budget)"``; empty where no
    phase was recorded. A search overruns where each device alone, always compiled and timed
    once, takes more than the budget (ViT-Large on devices of part of a core: minutes)."""
    if not result.phases:
        return ""
    notes = [f"the budget's end: {result.cut}"] if result.cut else []
    over = result.seconds - result.budget_s
    if result.budget_s and over > OVERRUN_SLACK * result.budget_s:
        notes.append(f"{_seconds(over)} over its {_seconds(result.budget_s)} budget")
    phases = ", ".join(f"{name} {s:.0f} s" for name, s in result.phases.items())
    return " (" + "; ".join([phases, *notes]) + ")"


OVERRUN_SLACK = 0.05
"""The share of the budget a search may run over before the report says it overran."""


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def plot(result: OptimizeResult, path: str | Path) -> Path:
    """Bars of each timed candidate's p50 with its p99 as a whisker and its predicted time as a
    dot; the kept one and ONNX Runtime stand out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tvm_hetero.viz import save_figure

    timed = [e for e in result.entries if e.samples_s]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(timed) + 1.5))
    colors = {"strategy": "tab:blue", "single": "tab:gray", "peer": "tab:orange"}
    for y, e in enumerate(timed):
        p50, p99 = e.p50_s * 1e3, e.p99_s * 1e3
        color = "tab:green" if e.status == "kept" else colors[e.kind]
        ax.barh(y, p50, color=color, xerr=[[0], [p99 - p50]], capsize=3)
        if e.predicted_s is not None:
            ax.plot(e.predicted_s * 1e3, y, "k.", markersize=8)
    ax.set_yticks(range(len(timed)), [e.name for e in timed])
    ax.invert_yaxis()
    unit = "ms per request (stream)" if result.objective == "throughput" else "ms"
    ax.set_xlabel(f"p50 {unit} (whisker: p99; dot: predicted)")
    ax.set_title(f"{result.model}: kept {result.kept.name} (green)")
    return save_figure(fig, path)
