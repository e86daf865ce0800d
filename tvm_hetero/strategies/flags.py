"""Argparse types for flags: numbers in a range (strategies' flags use them too)."""

from __future__ import annotations

import argparse
import math


def number(
    kind: type, low: float, high: float | None = None, high_open: bool = False,
    low_open: bool = False,
):  # fmt: skip
    """An argparse type: a finite ``kind`` from ``low`` to ``high`` (ends open when asked)."""
    allowed = f"{'>' if low_open else '>='} {low}"
    if high is not None:
        allowed = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind.__name__}") from None
        below = value <= low if low_open else value < low
        above = high is not None and (value >= high if high_open else value > high)
        if not math.isfinite(value) or below or above:
            raise argparse.ArgumentTypeError(f"{text!r} must be {allowed}")
        return value

    return parse


fraction = number(float, 0, 1, low_open=True)
"""An argparse type: a float in (0, 1]."""
