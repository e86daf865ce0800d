"""Markdown tables and the number formats the report writes."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table; ``None`` cells print as ``-``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join("-" if c is None else str(c) for c in row) + " |")
    return "\n".join(lines)


def ms(seconds_or_ms: float | None, *, seconds: bool = False) -> str | None:
    """A time in ms with three significant figures (``None`` stays ``None``)."""
    if seconds_or_ms is None:
        return None
    value = seconds_or_ms * 1e3 if seconds else seconds_or_ms
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def ratio(a: float | None, b: float | None) -> str | None:
    """``a / b`` as ``1.23x``."""
    if a is None or b is None or b == 0:
        return None
    return f"{a / b:.2f}x"


def share(part: float, whole: float) -> str:
    """``part / whole`` as a whole percentage."""
    return f"{100 * part / whole:.0f} %"


def median(values: Iterable[float]) -> float:
    """The median of the values."""
    return statistics.median(list(values))


def bullets(items: Iterable[str]) -> str:
    """A Markdown list."""
    return "\n".join(f"- {item}" for item in items)
