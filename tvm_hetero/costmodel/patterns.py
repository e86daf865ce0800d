"""EOP's performance patterns: linear, staircase and constant fits of time against a size.

EOP (VEE '22, Sec. 3.2, Algorithm 1) samples an operator's time along one partition dimension,
fits three patterns and keeps the one with the least error; the pattern then predicts the time of
any shard ``alpha * d``. Pure numpy: the samples come from :meth:`Profiler.sweep`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

MAX_STEPS = 64
"""Staircase step widths tried: every width up to this many units (and powers of two beyond)."""
PARSIMONY = 1.05
"""A pattern with more parameters must beat a simpler one's error by this factor to be kept."""


class PatternKind(StrEnum):
    """The three categorized patterns, simplest first."""

    CONSTANT = "constant"
    LINEAR = "linear"
    STAIRCASE = "staircase"


@dataclass(frozen=True)
class Pattern:
    """A fitted time model ``t(size)`` in seconds.

    Attributes
    ----------
    kind : PatternKind
        ``constant``: ``t = c``; ``linear``: ``t = a * size + b``; ``staircase``:
        ``t = a * ceil(size / step) + b``.
    params : tuple[float, ...]
        ``(c,)``, ``(a, b)`` or ``(a, b, step)``.
    error : float
        Mean relative error on held-out samples (leave-one-out), the figure the choice used.
    errors : Mapping[str, float]
        The same figure for every pattern tried.
    """

    kind: PatternKind
    params: tuple[float, ...]
    error: float
    errors: Mapping[str, float] = field(default_factory=dict)

    def predict(self, size: float) -> float:
        """Predicted seconds at ``size`` units (0 units take no time)."""
        if size <= 0:
            return 0.0
        return float(_evaluate(self.kind, self.params, np.asarray([size], dtype=float))[0])

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "kind": str(self.kind),
            "params": list(self.params),
            "error": self.error,
            "errors": dict(self.errors),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pattern:
        """Inverse of :meth:`to_dict`."""
        return cls(
            PatternKind(data["kind"]), tuple(data["params"]), data["error"], dict(data["errors"])
        )


def _evaluate(kind: PatternKind, params: Sequence[float], sizes: np.ndarray) -> np.ndarray:
    if kind is PatternKind.CONSTANT:
        return np.full_like(sizes, params[0])
    if kind is PatternKind.LINEAR:
        a, b = params
        return np.maximum(a * sizes + b, 0.0)
    a, b, step = params
    return np.maximum(a * np.ceil(sizes / step) + b, 0.0)


def _lstsq(feature: np.ndarray, times: np.ndarray) -> tuple[float, float, float]:
    """``times ~ a * feature + b`` with ``b >= 0`` (no work never takes negative time: a negative
    intercept would make any cut look cheaper than the whole): ``(a, b, squared error)``."""
    design = np.stack([feature, np.ones_like(feature)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, times, rcond=None)
    if b < 0:
        a, b = float(feature @ times / (feature @ feature)), 0.0
    return float(a), float(b), float(np.sum((a * feature + b - times) ** 2))


def _steps(max_size: float) -> list[int]:
    widths = set(range(2, min(MAX_STEPS, int(max_size // 2)) + 1))
    widths |= {2**i for i in range(1, int(math.log2(max(max_size, 2)))) if 2**i <= max_size / 2}
    return sorted(widths)


def _fit(kind: PatternKind, sizes: np.ndarray, times: np.ndarray) -> tuple[float, ...]:
    if kind is PatternKind.CONSTANT:
        return (float(np.mean(times)),)
    if kind is PatternKind.LINEAR:
        a, b, _ = _lstsq(sizes, times)
        return (a, b)
    best = None
    for step in _steps(float(sizes.max())):
        a, b, err = _lstsq(np.ceil(sizes / step), times)
        if best is None or err < best[0]:
            best = (err, (a, b, float(step)))
    if best is None:  # too few units for a step: a staircase of width 1 is the linear fit
        a, b, _ = _lstsq(sizes, times)
        return (a, b, 1.0)
    return best[1]


def _held_out_error(kind: PatternKind, sizes: np.ndarray, times: np.ndarray) -> float:
    """Mean relative error predicting each sample from a fit to all the others."""
    errs = []
    for i in range(len(sizes)):
        keep = np.arange(len(sizes)) != i
        params = _fit(kind, sizes[keep], times[keep])
        predicted = _evaluate(kind, params, sizes[i : i + 1])[0]
        errs.append(abs(predicted - times[i]) / times[i])
    return float(np.mean(errs))


def fit_pattern(sizes: Sequence[float], seconds: Sequence[float]) -> Pattern:
    """Fit the three patterns and keep the one with the least held-out error (Algorithm 1).

    Parameters
    ----------
    sizes : sequence of float
        Units along the partition dimension (rows, batch, channels...), at least 3 distinct.
    seconds : sequence of float
        Measured time at each size (positive).

    Returns
    -------
    Pattern
        Fitted on every sample; a pattern with more parameters is kept only when its held-out
        error is below ``1 / PARSIMONY`` of a simpler one's (noise alone never buys a staircase).
    """
    x = np.asarray(sizes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if x.shape != t.shape or len(np.unique(x)) < 3:
        raise ValueError(
            f"fit_pattern: need at least 3 distinct sizes with one time each, got sizes "
            f"{list(sizes)} and {len(t)} times"
        )
    if np.any(t <= 0) or np.any(x <= 0):
        raise ValueError("fit_pattern: sizes and times must be positive")
    errors = {str(k): _held_out_error(k, x, t) for k in PatternKind}
    chosen = PatternKind.CONSTANT
    for kind in (PatternKind.LINEAR, PatternKind.STAIRCASE):
        if errors[str(kind)] * PARSIMONY < errors[str(chosen)]:
            chosen = kind
    return Pattern(chosen, _fit(chosen, x, t), errors[str(chosen)], errors)


def sample_sizes(extent: int, count: int = 12) -> list[int]:
    """Sizes to sample along a dimension of ``extent`` units: evenly spread, ``extent`` included."""
    if extent < 1:
        raise ValueError(f"sample_sizes: extent must be >= 1, got {extent}")
    return sorted({max(1, round(extent * (i + 1) / count)) for i in range(count)})


class PatternStore:
    """Fitted patterns persisted as JSON next to the profile database.

    Keys are ``"<workload>|<target>|<mode>|<dim>"``; each entry keeps the pattern and the samples
    it was fitted on, so plots and refits need no new measurement.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.entries: dict[str, dict[str, Any]] = (
            json.loads(self.path.read_text()) if self.path.exists() else {}
        )

    @staticmethod
    def key(workload: str, target: str, mode: str, dim: str) -> str:
        """The entry key of one operator workload, device and dimension."""
        return f"{workload}|{target}|{mode}|{dim}"

    def get(self, key: str) -> Pattern | None:
        """The stored pattern, or ``None``."""
        entry = self.entries.get(key)
        return Pattern.from_dict(entry["pattern"]) if entry else None

    def fit(self, key: str, sizes: Sequence[int], seconds: Sequence[float]) -> Pattern:
        """The pattern of these samples: the stored one when it was fitted on exactly them (an
        identical operator, or an earlier run served from the profile database), else a new
        fit, stored."""
        entry = self.entries.get(key)
        samples = {"sizes": [int(s) for s in sizes], "seconds": [float(s) for s in seconds]}
        if entry and all(entry[k] == v for k, v in samples.items()):
            return Pattern.from_dict(entry["pattern"])
        pattern = fit_pattern(sizes, seconds)
        self.put(key, pattern, sizes, seconds)
        return pattern

    def put(self, key: str, pattern: Pattern, sizes: Sequence[int], seconds: Sequence[float]):
        """Store a pattern with its samples (written by :meth:`save`)."""
        self.entries[key] = {
            "pattern": pattern.to_dict(),
            "sizes": [int(s) for s in sizes],
            "seconds": [float(s) for s in seconds],
        }

    def save(self) -> Path:
        """Write every entry to :attr:`path`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.entries, indent=1, sort_keys=True))
        return self.path
