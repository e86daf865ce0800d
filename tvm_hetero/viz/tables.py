"""Tables for the terminal (rich): what commands and strategies' reports print."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table with right-aligned numeric columns."""
    t = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        numeric = rows and all(isinstance(r[i], int | float) or r[i] in ("", "-") for r in rows)
        t.add_column(col, justify="right" if numeric else "left")
    for r in rows:
        t.add_row(*[fmt(v) for v in r])
    return t


def fmt(value: Any) -> str:
    """Numbers with sensible precision; everything else as text."""
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)
