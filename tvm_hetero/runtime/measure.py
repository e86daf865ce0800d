"""Timing helpers that need only the TVM runtime (shared by the profiler and the offline runner)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

QUOTA_WINDOW_MS = 500
"""On a device held to a CPU quota, each sample runs this long (five CFS periods of 100 ms): a
shorter run fits in one period's burst and runs faster than the device can sustain (a layer of
DeiT-Small at 0.4 core: samples of 4.6 ms in a burst, 23-25 ms across a throttled period), and
a sample that ends inside a period gets part of one more burst (at most a fifth here; 2.5
periods made the same tile's samples differ by 20 %)."""


@dataclass(frozen=True)
class MeasureConfig:
    """How long to measure.

    Attributes
    ----------
    repeat : int
        Samples to take (after one warm-up run, which is excluded).
    min_repeat_ms : float
        Each sample runs the function ``number`` times, ``number`` chosen so a sample lasts at
        least this long (adaptive: fast kernels are repeated more).
    max_number : int
        Upper bound of ``number``.
    """

    repeat: int = 10
    min_repeat_ms: float = 20.0
    max_number: int = 10_000

    def __post_init__(self) -> None:
        if self.repeat < 1 or self.min_repeat_ms < 0 or self.max_number < 1:
            raise ValueError(
                "MeasureConfig: repeat and max_number must be >= 1 and min_repeat_ms >= 0, "
                f"got repeat={self.repeat}, min_repeat_ms={self.min_repeat_ms}, "
                f"max_number={self.max_number}"
            )


PROFILE_CONFIG = MeasureConfig(repeat=5, min_repeat_ms=10)
"""What the planners' profilers time with unless told otherwise (EOP's, EdgePipe's layers,
FlexPie's traces)."""


def for_device(config: MeasureConfig, cpu_quota: float | None) -> MeasureConfig:
    """``config``, with samples of at least :data:`QUOTA_WINDOW_MS` for a device held to a CPU
    quota (``cpu_quota`` cores), so that what is timed is the rate the quota sustains."""
    if cpu_quota is None or config.min_repeat_ms >= QUOTA_WINDOW_MS:
        return config
    return MeasureConfig(min(config.repeat, 3), QUOTA_WINDOW_MS, config.max_number)


def serves(
    config: MeasureConfig, samples: int, number: int, median_s: float,
    asked_ms: float | None = None,
) -> bool:  # fmt: skip
    """Whether a stored timing (``samples`` samples of ``number`` runs, ``median_s`` per run,
    measured when ``asked_ms`` was asked of each sample) is what ``config`` asks: as many
    samples, each asked to last as long (or of ``max_number`` runs). A timing stored without
    ``asked_ms`` serves when its samples lasted at least half of ``min_repeat_ms``."""
    if asked_ms is None:
        asked_ms = number * median_s * 2e3
    long_enough = number >= config.max_number or asked_ms >= config.min_repeat_ms
    return samples >= config.repeat and long_enough


@dataclass(frozen=True)
class Timing:
    """Samples (seconds, one per repeat) and the ``number`` of runs each averages."""

    samples_s: tuple[float, ...]
    number: int
    extra: dict = field(default_factory=dict)
    """What the record keeps besides the samples (a per-operator run's operator times)."""


def random_args(
    shapes_dtypes: Sequence[tuple[Sequence[int], str]], seed: int = 0
) -> list[np.ndarray]:
    """Random float arrays; integer arrays are zeros (always valid indices)."""
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in shapes_dtypes:
        if any(not isinstance(d, int) for d in shape):
            raise ValueError(f"cannot time a workload with a symbolic shape {tuple(shape)}")
        if np.issubdtype(np.dtype(dtype), np.floating):
            out.append(rng.standard_normal(shape).astype(dtype))
        else:
            out.append(np.zeros(shape, dtype))
    return out


def choose_number(first_run_s: float, config: MeasureConfig) -> int:
    """Runs per sample so that a sample lasts ``min_repeat_ms``."""
    wanted = config.min_repeat_ms / 1e3 / max(first_run_s, 1e-9)
    return int(min(config.max_number, max(1, math.ceil(wanted))))


def adaptive(evaluate: Callable[[int, int], object], config: MeasureConfig) -> Timing:
    """One run (after ``time_evaluator``'s own warm-up) sizes ``number``; then ``repeat`` samples.

    ``evaluate(number, repeat)`` returns a ``BenchmarkResult``.
    """
    first = evaluate(1, 1).results[0]  # type: ignore[attr-defined]
    number = choose_number(first, config)
    result = evaluate(number, config.repeat)
    return Timing(tuple(float(s) for s in result.results), number)  # type: ignore[attr-defined]
