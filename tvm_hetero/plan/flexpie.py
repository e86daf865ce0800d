"""FlexPie's dynamic partition planner (paper Sec. 3.3, Algorithm 1) and its baselines.

Pure: per-segment compute costs and per-boundary move costs in (from the estimators), a scheme
and a mode per layer out.

Every layer ``l`` of a model is cut over the devices by a *scheme* (InH, InW, OutC, 2D-grid...)
and has a *mode*: **T** (its output is exchanged before the next layer) or **NT** (no exchange:
the next layer's halo was computed here, redundantly, and the next layer uses the same scheme:
FlexPie's code admits a run of NT layers only within one scheme). A plan is therefore a
sequence of *segments*, runs of layers ``a..b`` in one scheme where ``a..b-1`` are NT and ``b``
is T. Its time is the sum, over segments, of moving the tensor that enters the segment into
the segment's tiles (the halo of the whole run included) and computing the segment; the model's
output is gathered on the home device at the end (the paper's last layer "must be transmitted").
A move's time also depends on the segment before it, whose compute is how long the links sat
idle (a shaped link lets a burst through after a pause; FlexPie's DSP links have none).

The DP runs backwards (the paper's reverse search): ``best[i][p][e]`` is the least time from
the tensor entering layer ``i``, held as scheme ``p`` (or whole at home) by a segment of ``e``
layers, to the gathered output. Only T layers are states (NT states are skipped: a segment's
cost is fixed only once its T end is known); each state tries every scheme ``q`` and run length
``d <= max_run`` of the next segment (the paper's backtracking depth, 5 NT layers in FlexPie's
code), which is exact for segment costs of this form: ``O(n k^2 max_run^2)`` evaluations for
``n`` layers and ``k`` schemes, against ``k^n 2^(n-1)`` for exhaustive search.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MAX_RUN = 6
"""Layers in one segment at most: 5 NT layers and their T end (FlexPie's ``update_dpnn``)."""


@dataclass(frozen=True)
class SpatialProblem:
    """What the planner needs, predicted by the estimators.

    Attributes
    ----------
    schemes : tuple[str, ...]
        Scheme names, ``k`` of them.
    compute_s : numpy.ndarray
        ``compute_s[a, d - 1, q]``: seconds to compute layers ``a .. a + d - 1`` as one segment
        in scheme ``q`` (the slowest device's tiles, halos included); ``inf`` where not allowed
        (past the last layer, a layer the scheme cannot cut, a run the scheme cannot fuse).
        Shape ``(n, max_run, k)``.
    move_s : numpy.ndarray
        ``move_s[i, p, e, q, d]``: seconds to bring the tensor entering layer ``i`` (``i = n``:
        the model's output), held as scheme ``p`` by a segment of ``e`` layers (the one before,
        whose compute the links sat idle through), to the tiles a segment of ``d`` layers in
        scheme ``q`` reads. Index ``k`` is "whole, on the home device": ``p = k, e = 0`` for the
        model's input (``i = 0``), ``q = k, d = 0`` for the final gather. Shape ``(n + 1, k + 1,
        max_run + 1, k + 1, max_run + 1)``; unused entries ``inf``.
    """

    schemes: tuple[str, ...]
    compute_s: np.ndarray
    move_s: np.ndarray

    def __post_init__(self) -> None:
        n, runs, k = self.compute_s.shape
        if k != len(self.schemes) or n == 0:
            raise ValueError(f"SpatialProblem: compute_s is {self.compute_s.shape}, need (n, r, k)")
        want = (n + 1, k + 1, runs + 1, k + 1, runs + 1)
        if self.move_s.shape != want:
            raise ValueError(f"SpatialProblem: move_s is {self.move_s.shape}, need {want}")

    @property
    def layers(self) -> int:
        """``n``: layers of the model."""
        return self.compute_s.shape[0]

    @property
    def max_run(self) -> int:
        """The longest segment the costs describe."""
        return self.compute_s.shape[1]


@dataclass(frozen=True)
class Segment:
    """Layers ``start .. stop - 1`` in one scheme: NT but the last, which is T."""

    start: int
    stop: int
    scheme: str
    compute_s: float
    move_in_s: float


@dataclass(frozen=True)
class SpatialPartition:
    """A scheme and mode per layer, as segments, with its predicted time."""

    segments: tuple[Segment, ...]
    gather_s: float

    @property
    def predicted_s(self) -> float:
        """Moves, computes and the final gather, one after another (no overlap, as FlexPie)."""
        return sum(s.compute_s + s.move_in_s for s in self.segments) + self.gather_s

    def layer_modes(self) -> list[tuple[str, str]]:
        """``(scheme, "T" | "NT")`` per layer."""
        return [
            (s.scheme, "T" if layer == s.stop - 1 else "NT")
            for s in self.segments for layer in range(s.start, s.stop)
        ]  # fmt: skip


def evaluate(problem: SpatialProblem, cuts: Sequence[tuple[int, int, int]]) -> SpatialPartition:
    """The partition of segments ``(start, stop, scheme index)``, which must tile the layers."""
    k, segments, held, at, e = len(problem.schemes), [], len(problem.schemes), 0, 0
    for start, stop, q in cuts:
        if start != at or not start < stop <= problem.layers:
            raise ValueError(f"evaluate: segments {list(cuts)} do not tile {problem.layers} layers")
        d = stop - start
        compute = float(problem.compute_s[start, d - 1, q]) if d <= problem.max_run else np.inf
        move = float(problem.move_s[start, held, e, q, d]) if d <= problem.max_run else np.inf
        segments.append(Segment(start, stop, problem.schemes[q], compute, move))
        held, at, e = q, stop, d if d <= problem.max_run else 0
    if at != problem.layers:
        raise ValueError(f"evaluate: segments {list(cuts)} do not tile {problem.layers} layers")
    return SpatialPartition(tuple(segments), float(problem.move_s[problem.layers, held, e, k, 0]))


def flexpie(
    problem: SpatialProblem, schemes: Sequence[str] | None = None, max_run: int | None = None
) -> SpatialPartition:
    """The least-time partition (the reverse DP), over ``schemes`` only (default: all) and
    segments of at most ``max_run`` layers (default: all the costs describe).

    ``max_run=1`` is the layer-wise baseline (every layer T, any scheme); one scheme with the
    default ``max_run`` is the fused baseline of that scheme; one scheme and ``max_run=1`` is
    the fixed scheme. Raises ``ValueError`` when no partition has a finite time.
    """
    n, k = problem.layers, len(problem.schemes)
    allowed = _scheme_indices(problem, schemes)
    runs = min(max_run or problem.max_run, problem.max_run)
    r = problem.max_run
    best = np.full((n + 1, k + 1, r + 1), np.inf)  # [i, p, e]
    choice = np.zeros((n + 1, k + 1, r + 1, 2), dtype=int)  # (q, d) of the next segment
    best[n] = problem.move_s[n, :, :, k, 0]
    mask = np.full(k, np.inf)
    mask[allowed] = 0.0
    for i in range(n - 1, -1, -1):
        d_max = min(runs, n - i)
        # total[p, e, q, d - 1]: move into segment (q, d), compute it, then the best from there
        seg = problem.compute_s[i, :d_max, :].T + mask[:, None]  # (k, d_max)
        after = np.stack([best[i + d, :k, d] for d in range(1, d_max + 1)], axis=1)  # (k, d_max)
        total = problem.move_s[i, :, :, :k, 1 : d_max + 1] + (seg + after)[None, None]
        flat = total.reshape(k + 1, r + 1, -1)
        pick = np.argmin(flat, axis=2)
        best[i] = np.take_along_axis(flat, pick[..., None], axis=2)[..., 0]
        choice[i, :, :, 0], choice[i, :, :, 1] = np.divmod(pick, d_max)
        choice[i, :, :, 1] += 1
    if not np.isfinite(best[0, k, 0]):
        raise ValueError("flexpie: no partition of finite time with these schemes and runs")
    cuts, i, held, e = [], 0, k, 0
    while i < n:
        q, d = (int(v) for v in choice[i, held, e])
        cuts.append((i, i + d, q))
        i, held, e = i + d, q, d
    return evaluate(problem, cuts)


def _scheme_indices(problem: SpatialProblem, schemes: Sequence[str] | None) -> list[int]:
    if schemes is None:
        return list(range(len(problem.schemes)))
    unknown = [s for s in schemes if s not in problem.schemes]
    if unknown:
        raise ValueError(f"flexpie: unknown schemes {unknown}; known: {list(problem.schemes)}")
    return [problem.schemes.index(s) for s in schemes]


def baselines(
    problem: SpatialProblem, fallback: str | None = "Home"
) -> dict[str, SpatialPartition]:
    """The paper's baselines, each through the same costs: every scheme fixed (every layer it
    can cut cut by it, all T), the layer-wise optimum (a scheme per layer, all T), the fused
    optimum per scheme (every layer it can cut cut by it, NT runs chosen) and, when
    ``fallback`` is a scheme, the whole model in it alone (``single``). Only the layers a
    scheme cannot cut take ``fallback`` in its fixed and fused baselines (a deployment of that
    scheme would run them whole: :func:`only`); baselines with no finite time are left out."""
    out: dict[str, SpatialPartition] = {}
    spare = [fallback] if fallback in problem.schemes else []
    own = [s for s in problem.schemes if s != fallback]
    pure = {s: only(problem, s, fallback) if spare else problem for s in own}
    candidates = {f"fixed-{s}": (pure[s], [s, *spare], 1) for s in own}
    candidates["layerwise"] = (problem, None, 1)
    candidates |= {f"fused-{s}": (pure[s], [s, *spare], None) for s in own}
    if spare:
        candidates["single"] = (problem, spare, None)
    for name, (restricted, schemes, runs) in candidates.items():
        try:
            out[name] = flexpie(restricted, schemes, runs)
        except ValueError:
            continue
    return out


def only(problem: SpatialProblem, scheme: str, fallback: str) -> SpatialProblem:
    """``problem`` with ``fallback`` kept off every layer that ``scheme`` can cut (alone): a
    fixed or fused baseline of ``scheme`` cuts every such layer, whatever it costs (let the DP
    choose ``fallback`` anywhere, and at 50 Mbit/s every baseline was the home device alone)."""
    q, f = problem.schemes.index(scheme), problem.schemes.index(fallback)
    cuttable = np.isfinite(problem.compute_s[:, 0, q])
    compute = problem.compute_s.copy()
    for a in range(problem.layers):
        for d in range(1, problem.max_run + 1):
            if cuttable[a : a + d].any():
                compute[a, d - 1, f] = np.inf
    return SpatialProblem(problem.schemes, compute, problem.move_s)


def scores(times: dict[str, float]) -> dict[str, float]:
    """The paper's performance score of each strategy: the best time over its time."""
    fastest = min(times.values())
    return {name: fastest / t for name, t in times.items()}


def confirm_candidates(
    partitions: Mapping[str, SpatialPartition], count: int, always: str = "single"
) -> list[str]:
    """The plans to time end to end before one is kept: ``flexpie`` (which must be among
    ``partitions``), then the others by predicted time, ``count`` distinct partitions in all
    (a baseline with the segments of one already chosen is the same plan), and ``always`` (the
    home device alone) if it is a partition and not chosen yet. ``count`` of 1 keeps FlexPie's
    plan and ``always``; 0 times nothing."""
    if count <= 0:
        return []
    chosen: dict[tuple, str] = {}
    ranked = sorted(partitions, key=lambda n: (n != "flexpie", partitions[n].predicted_s))
    for name in ranked:
        cuts = tuple((s.start, s.stop, s.scheme) for s in partitions[name].segments)
        if cuts not in chosen and (len(chosen) < count or name == always):
            chosen[cuts] = name
    return list(chosen.values())


def brute_force(problem: SpatialProblem) -> float:
    """The least time over every scheme and mode of every layer (``k^n 2^(n-1)`` sequences), for
    checking :func:`flexpie` on small instances. A sequence whose NT layer is followed by another
    scheme is not a partition and is skipped."""
    n, k = problem.layers, len(problem.schemes)
    best = np.inf
    for schemes in itertools.product(range(k), repeat=n):
        for modes in itertools.product((True, False), repeat=n - 1):  # True: T
            ends = [i for i in range(n - 1) if modes[i]] + [n - 1]
            if any(not t and schemes[i] != schemes[i + 1] for i, t in enumerate(modes)):
                continue
            cuts, start = [], 0
            for end in ends:
                cuts.append((start, end + 1, schemes[end]))
                start = end + 1
            best = min(best, evaluate(problem, cuts).predicted_s)
    return float(best)
