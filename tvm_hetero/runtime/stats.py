"""Latency statistics of repeated runs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyStats:
    """Latency of repeated end-to-end runs, in milliseconds (one sample per run)."""

    samples_ms: tuple[float, ...]

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0-100)."""
        return float(np.percentile(self.samples_ms, q))

    @property
    def median_ms(self) -> float:
        """Median (p50) latency."""
        return float(np.median(self.samples_ms))

    @property
    def p99_ms(self) -> float:
        """99th-percentile latency."""
        return self.percentile(99)

    @property
    def p999_ms(self) -> float:
        """99.9th-percentile latency."""
        return self.percentile(99.9)

    @property
    def mean_ms(self) -> float:
        """Mean latency."""
        return float(np.mean(self.samples_ms))

    @property
    def std_ms(self) -> float:
        """Standard deviation."""
        return float(np.std(self.samples_ms))
