"""Algorithm 1 of Lee et al.: the fewest whole-model profiling runs that measure every cost.

``n`` node-cost runs (device ``i`` first, device 0 for what ``i`` cannot run) measure every node
cost. Edge-cost runs then cover the DA edges those runs missed: the DCG is visited in topological
order, each visited copy keeping the profiled edge lists (covered DA edges) of the partial paths
that reach it, summarised by inclusion; the fewest of those paths covering every missing DA
edge become the edge runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tvm_hetero.plan.dcg import DCG, END, DAKey

MAX_STATES = 64
"""Profiled edge lists kept per DCG node after inclusion summarisation (bounds the visit)."""


@dataclass(frozen=True)
class ProfilingRun:
    """One whole-model run: a full assignment and what it measures."""

    assignment: Mapping[str, int]
    purpose: str
    new_da_edges: frozenset[DAKey]


def node_runs(dcg: DCG) -> list[ProfilingRun]:
    """One run per device with priority ``[device i, device 0]``."""
    runs, seen = [], set()
    for i, name in enumerate(dcg.devices):
        assignment = {o: (i if i in dcg.capable[o] else 0) for o in dcg.ops}
        covered = dcg.covered(assignment)
        runs.append(ProfilingRun(assignment, f"node costs of {name}", frozenset(covered - seen)))
        seen |= covered
    return runs


def profiling_runs(dcg: DCG) -> list[ProfilingRun]:
    """Node runs, then the fewest edge runs covering every DA edge they missed.

    The topological visit yields, at the end node, the inclusion-maximal covered sets of all
    paths; the fewest of them covering every missing DA edge is an exact set cover, solved by
    integer programming. (Any cover can swap each run for a maximal superset, so this is the
    minimum unless the per-node state bound ``MAX_STATES`` cut a maximal set.)
    """
    runs = node_runs(dcg)
    missing = dcg.da_edges() - set().union(*(r.new_da_edges for r in runs))
    if not missing:
        return runs
    pool = _end_states(dcg, missing)
    for key in missing - set().union(*(c for c, _ in pool)):
        pool.append(_direct(dcg, {key}, missing))
    for covered, assignment in _min_cover(pool, missing):
        runs.append(ProfilingRun(assignment, "edge costs", frozenset(covered & missing)))
        missing -= covered
    return runs


def _min_cover(pool: list, missing: set[DAKey]) -> list:
    """The fewest pool entries whose covered sets contain ``missing`` (set cover, by MILP)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    keys = sorted(missing, key=str)
    a = np.array([[1.0 if k in covered else 0.0 for covered, _ in pool] for k in keys])
    result = milp(
        np.ones(len(pool)), constraints=LinearConstraint(a, 1, np.inf),
        integrality=np.ones(len(pool)), bounds=Bounds(0, 1),
    )  # fmt: skip
    if not result.success:
        raise AssertionError(f"set cover failed: {result.message}")
    chosen = [pool[i] for i in range(len(pool)) if result.x[i] > 0.5]
    return sorted(chosen, key=lambda s: -len(s[0] & missing))


def _end_states(dcg: DCG, missing: set[DAKey]) -> list[tuple[set[DAKey], dict[str, int]]]:
    """Topological visit keeping, per copy, the inclusion-maximal covered sets of its paths."""
    preds: dict[str, list] = {o: [] for o in [*dcg.ops, END]}
    for e in dcg.edges:
        preds[e.dst].append(e)
    last_use = {e.src: i for i, o in enumerate([*dcg.ops, END]) for e in preds[o]}
    states: list[tuple[frozenset[DAKey], dict[str, int]]] = [(frozenset(), {})]
    for i, node in enumerate(dcg.ops):
        live = [o for o in dcg.ops[: i + 1] if last_use.get(o, -1) > i]
        grown = []
        for covered, partial in states:
            for dev in dcg.capable[node]:
                new = set(covered)
                for e in preds[node]:
                    key = dcg.da_key(e, dcg.device_of(e.src, partial), dev)
                    if key in missing:
                        new.add(key)
                grown.append((frozenset(new), {**partial, node: dev}))
        states = _summarise(grown, live)
    finals = []
    for covered, partial in states:
        new = set(covered)
        for e in preds[END]:
            key = dcg.da_key(e, dcg.device_of(e.src, partial), 0)
            if key in missing:
                new.add(key)
        finals.append((frozenset(new), partial))
    return [(set(c), a) for c, a in _summarise(finals, [])]


def _summarise(states: list, live: list[str]) -> list:
    """Per placement of the ``live`` operators (those later edges read), drop states whose covered
    set is included in another's: such a state can never cover more. Keep ``MAX_STATES`` in all."""
    states.sort(key=lambda s: -len(s[0]))
    kept: list = []
    by_frontier: dict[tuple, list] = {}
    for covered, partial in states:
        group = by_frontier.setdefault(tuple(partial[o] for o in live), [])
        if any(covered <= other for other in group):
            continue
        group.append(covered)
        kept.append((covered, partial))
        if len(kept) == MAX_STATES:
            break
    return kept


def _direct(dcg: DCG, wanted: set[DAKey], missing: set[DAKey]) -> tuple[set[DAKey], dict[str, int]]:
    """An assignment exercising a DA edge of ``wanted``: its two ends placed, the rest home."""
    for e in dcg.edges:
        for a in dcg.placements(e.src):
            for b in dcg.placements(e.dst):
                if dcg.da_key(e, a, b) in wanted:
                    ends = {e.src: a, e.dst: b}
                    assignment = {o: ends.get(o, 0) for o in dcg.ops}
                    return dcg.covered(assignment) & missing, assignment
    raise AssertionError("a DA edge that no assignment produces")
