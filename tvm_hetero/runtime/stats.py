"""Latency statistics of repeated runs, and the warm-up before them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

WARMUP_S = 1.0
"""A warm-up stops once its runs have taken this long (one run at least)."""


def warm_up(run: Callable[[], object], runs: int, seconds: float | None = None) -> int:
    """Up to ``runs`` untimed calls of ``run``, fewer once they have taken ``seconds``.

    The first run of a fresh session is the slow one (its memory first touched, its threads
    started); where one run takes seconds, the next is already settled. Five warm-up runs of
    ViT-Large on the emulated parameter server's devices, about four seconds each, were a
    third of a search's timing of its candidates.

    Parameters
    ----------
    run
        One run (its result is dropped).
    runs
        The most runs; 0 runs none.
    seconds
        No run starts once the ones before it have taken this long (None:
        :data:`WARMUP_S`).

    Returns
    -------
    int
        How many runs were made.
    """
    seconds = WARMUP_S if seconds is None else seconds
    began = time.perf_counter()
    for done in range(runs):
        if done and time.perf_counter() - began >= seconds:
            return done
        run()
    return runs


def warm_up_runs(runs: int, run_s: float) -> int:
    """How many runs :func:`warm_up` makes of at most ``runs``, each ``run_s`` seconds long:
    for a planner's estimate of a turn of timing."""
    if runs < 1:
        return 0
    return min(runs, max(1, math.ceil(WARMUP_S / run_s))) if run_s > 0 else runs


def runs_within(seconds: float, run_s: float | None, most: int, least: int = 5) -> int:
    """Timed runs of ``run_s`` seconds each that fit in ``seconds``, from ``least`` to
    ``most`` (``most`` where the run's length is not known)."""
    if not run_s or run_s <= 0:
        return most
    return max(min(least, most), min(most, math.floor(seconds / run_s)))


def first_turn_s(run_s: float, warmup: int, runs: int) -> float:
    """Seconds of a deployment's first turn in interleaved rounds, each run ``run_s`` long:
    its warm-up (:func:`warm_up_runs` of at most ``warmup``) and ``runs`` timed runs."""
    return (warm_up_runs(warmup, run_s) + runs) * run_s


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


@dataclass(frozen=True)
class PipelineStats:
    """A pipelined run of microbatches, measured.

    Attributes
    ----------
    microbatches : int
        How many microbatches ran.
    total_s : float
        From the first dispatch to the last microbatch's end.
    latency_s : tuple[float, ...]
        Each microbatch from its first step's start to its end.
    busy_s : dict[str, float]
        Per worker (stage): time in units and copies, less what its units waited for inputs.
    ends_s : tuple[float, ...]
        When each microbatch ended, from the run's start.
    waited_s : dict[str, float]
        Per worker: time its units waited on it for inputs still arriving (a slow link's
        transfer that the stage's computing did not hide).
    """

    microbatches: int
    total_s: float
    latency_s: tuple[float, ...]
    busy_s: dict[str, float]
    ends_s: tuple[float, ...] = ()
    waited_s: dict[str, float] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        """Microbatches per second."""
        return self.microbatches / self.total_s

    @property
    def period_s(self) -> float:
        """Seconds per microbatch in this run (the inverse of the throughput)."""
        return self.total_s / self.microbatches

    @property
    def steady_s(self) -> float:
        """Seconds between consecutive microbatches leaving the pipeline, once it is full: the
        period a stream of microbatches sees (the run's first microbatch also pays the fill)."""
        ends = sorted(self.ends_s)
        if len(ends) < 2:
            return self.total_s
        return (ends[-1] - ends[0]) / (len(ends) - 1)

    def utilisation(self, worker: str) -> float:
        """Share of the run ``worker`` was busy (in units and copies, not waiting for inputs)."""
        return self.busy_s.get(worker, 0.0) / self.total_s


def pipeline_stats(timeline, finished_s: tuple[float, ...]) -> PipelineStats:
    """Stats of a pipelined run from the executor's timeline and each run's end."""
    first: dict[int, float] = {}
    busy: dict[str, float] = {}
    waited: dict[str, float] = {}
    for e in timeline.events:
        first[e.microbatch] = min(first.get(e.microbatch, e.start_s), e.start_s)
        busy[e.worker] = busy.get(e.worker, 0.0) + e.busy_s
        waited[e.worker] = waited.get(e.worker, 0.0) + e.waited_s
    latency = tuple(end - first.get(k, 0.0) for k, end in enumerate(finished_s))
    return PipelineStats(len(finished_s), max(finished_s), latency, busy, tuple(finished_s), waited)
