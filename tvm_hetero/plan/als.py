"""Optimal operator-to-device assignment (Lee et al.): assembly-line DP, exact MILP, baselines.

Execution is sequential (one operator at a time, as in the paper): the time of an assignment is
the sum of its operators' costs on their devices plus the cost of every transfer it makes. The DP
of Eq. (2) is exact on chains; on graphs with branches it assumes every predecessor sits where the
previous operator in topological order sits, so :func:`exact_assignment` (integer programming)
gives the true optimum to compare with.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tvm_hetero.plan.dcg import DCG, END, START, CGEdge, DAKey


class CostError(RuntimeError):
    """Costs that do not cover what the assignment problem needs, or a solver that failed.

    Not a ``ValueError``: on the command line the costs come from our own profiling, which gives
    every one, so a missing cost is a bug of ours (exit 1), not the user's mistake (exit 2)."""


@dataclass(frozen=True)
class Costs:
    """Measured (or imported) costs in seconds.

    Attributes
    ----------
    node : Mapping[str, Mapping[int, float]]
        Operator -> device index -> time. Every capable (operator, device) pair needs a value.
    edge : Mapping[DAKey, float]
        Transfer time of each DA edge.
    """

    node: Mapping[str, Mapping[int, float]]
    edge: Mapping[DAKey, float]


def check_costs(dcg: DCG, costs: Costs) -> None:
    """Raise :class:`CostError` naming what is missing."""
    missing_nodes = [
        (o, d) for o in dcg.ops for d in dcg.capable[o] if d not in costs.node.get(o, {})
    ]
    if missing_nodes:
        raise CostError(
            f"no node cost for {len(missing_nodes)} (operator, device) pair(s), "
            f"e.g. {missing_nodes[:3]}"
        )
    missing_edges = sorted(dcg.da_edges() - set(costs.edge), key=str)
    if missing_edges:
        raise CostError(f"no cost for {len(missing_edges)} DA edge(s), e.g. {missing_edges[:3]}")


def _transfer(dcg: DCG, costs: Costs, e: CGEdge, a: int, b: int) -> float:
    key = dcg.da_key(e, a, b)
    return 0.0 if key is None else costs.edge[key]


def total_time(dcg: DCG, costs: Costs, assignment: Mapping[str, int]) -> float:
    """Sequential time of an assignment: node costs plus every transfer it makes."""
    nodes = sum(costs.node[o][assignment[o]] for o in dcg.ops)
    edges = sum(
        _transfer(dcg, costs, e, dcg.device_of(e.src, assignment), dcg.device_of(e.dst, assignment))
        for e in dcg.edges
    )
    return nodes + edges


def als_assignment(dcg: DCG, costs: Costs) -> tuple[dict[str, int], float]:
    """Assembly-line scheduling, Eq. (2): returns the assignment and its true total time.

    ``f[d]`` is the best time up to the current operator with it on device ``d``; the transfers
    into operator ``j`` on ``d`` from all its predecessors (``T``) are charged as if they sat on
    the device of operator ``j - 1``. Exact when the graph is a chain.
    """
    check_costs(dcg, costs)
    preds: dict[str, list[CGEdge]] = {o: [] for o in [*dcg.ops, END]}
    for e in dcg.edges:
        preds[e.dst].append(e)
    n = len(dcg.devices)
    f = np.full(n, math.inf)
    back: list[np.ndarray] = []
    prev_dev: list[int] = [0]  # START is home
    for j, op in enumerate(dcg.ops):
        g = np.full(n, math.inf)
        arg = np.zeros(n, dtype=int)
        for d in dcg.capable[op]:
            for p in prev_dev if j == 0 else range(n):
                base = 0.0 if j == 0 else f[p]
                if math.isinf(base):
                    continue
                t = sum(_transfer(dcg, costs, e, _assumed(dcg, e.src, p), d) for e in preds[op])
                value = base + t + costs.node[op][d]
                if value < g[d]:
                    g[d], arg[d] = value, p
        f = g
        back.append(arg)
    exit_cost = [
        math.inf
        if math.isinf(f[d])
        else f[d] + sum(_transfer(dcg, costs, e, d, 0) for e in preds[END])
        for d in range(n)
    ]
    d = int(np.argmin(exit_cost))
    assignment: dict[str, int] = {}
    for j in range(len(dcg.ops) - 1, -1, -1):
        assignment[dcg.ops[j]] = d
        d = int(back[j][d])
    return assignment, total_time(dcg, costs, assignment)


def _assumed(dcg: DCG, pred: str, p: int) -> int:
    """Where the DP assumes a predecessor runs: with the previous operator, or home if it cannot."""
    return 0 if pred == START or p not in dcg.capable[pred] else p


def exact_assignment(dcg: DCG, costs: Costs) -> tuple[dict[str, int], float]:
    """The optimal assignment of any DAG, by mixed-integer programming (``scipy.optimize.milp``).

    Binary ``x[v, d]`` (operator ``v`` on device ``d``), one device per operator; a cross-device
    transfer ``y[e, a, b] >= x[u, a] + x[v, b] - 1`` for each edge and device pair.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    check_costs(dcg, costs)
    index = {(o, d): i for i, (o, d) in enumerate((o, d) for o in dcg.ops for d in dcg.capable[o])}
    cost = [costs.node[o][d] for (o, d) in index]
    rows, lower, upper = [], [], []
    for o in dcg.ops:  # one device per operator
        rows.append({index[(o, d)]: 1.0 for d in dcg.capable[o]})
        lower.append(1.0)
        upper.append(1.0)
    for e in dcg.edges:
        src = (
            [(0, None)] if e.src == START else [(a, index[(e.src, a)]) for a in dcg.capable[e.src]]
        )
        dst = [(0, None)] if e.dst == END else [(b, index[(e.dst, b)]) for b in dcg.capable[e.dst]]
        for (a, ia), (b, ib) in itertools.product(src, dst):
            price = _transfer(dcg, costs, e, a, b)
            if price == 0:
                continue
            if ia is None or ib is None:  # one end fixed at home: the price rides on x
                cost[ib if ia is None else ia] += price
                continue
            y = len(cost)
            cost.append(price)
            rows.append({y: 1.0, ia: -1.0, ib: -1.0})  # y - xa - xb >= -1
            lower.append(-1.0)
            upper.append(math.inf)
    a = np.zeros((len(rows), len(cost)))
    for r, row in enumerate(rows):
        for c, v in row.items():
            a[r, c] = v
    integrality = np.array([1] * len(index) + [0] * (len(cost) - len(index)))
    result = milp(  # in nanoseconds: HiGHS stops within an absolute gap of 1e-6 (1 us in s)
        np.array(cost) * 1e9, constraints=LinearConstraint(a, lower, upper),
        integrality=integrality, bounds=Bounds(0, 1), options={"mip_rel_gap": 0.0},
    )  # fmt: skip
    if not result.success:
        raise CostError(f"exact_assignment: the solver failed: {result.message}")
    assignment = {o: d for (o, d), i in index.items() if result.x[i] > 0.5}
    return assignment, total_time(dcg, costs, assignment)


def brute_force(dcg: DCG, costs: Costs) -> tuple[dict[str, int], float]:
    """Try every assignment (small graphs only: tests)."""
    best: tuple[dict[str, int], float] = ({}, math.inf)
    for devs in itertools.product(*(dcg.capable[o] for o in dcg.ops)):
        assignment = dict(zip(dcg.ops, devs, strict=True))
        t = total_time(dcg, costs, assignment)
        if t < best[1]:
            best = (assignment, t)
    return best


def priority_assignment(dcg: DCG, priority: Sequence[int]) -> dict[str, int]:
    """ONNX-Runtime-style baseline: each operator on the first capable device in ``priority``."""
    out = {}
    for o in dcg.ops:
        out[o] = next((d for d in priority if d in dcg.capable[o]), 0)
    return out


def priority_orders(devices: int) -> list[list[int]]:
    """Each device first, the others in list order: the priority baselines of the paper
    ((CPU_P, PIM, CPU_S), (PIM, CPU_P, CPU_S)) generalised to any device list."""
    return [[i, *[j for j in range(devices) if j != i]] for i in range(devices)]


def best_priority_assignment(dcg: DCG, costs: Costs) -> tuple[dict[str, int], float]:
    """The best priority baseline and its total time."""
    candidates = [priority_assignment(dcg, order) for order in priority_orders(len(dcg.devices))]
    timed = [(a, total_time(dcg, costs, a)) for a in candidates]
    return min(timed, key=lambda at: at[1])
