"""DUET's subgraph placement (paper Sec. IV-C, Algorithm 1) and its baselines.

Pure: subgraph costs in, an assignment (subgraph -> device index) out. Measurement comes in as a
function (``measure(assignment) -> seconds``): the strategy passes one that compiles and times the
model end to end; tests pass the cost model itself.

The cost model is a list schedule of the concurrent runtime: each device runs one subgraph at a
time, a subgraph starts when its device is free and its inputs have arrived (a copy or handoff when
they come from another device), graph inputs start on the home device (index 0) and outputs end
there.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

HOME = 0
INPUTS = -1
"""Source index of an edge from the graph's inputs (on the home device)."""
OUTPUTS = -1
"""Destination index of an edge to the graph's outputs (back on the home device)."""


@dataclass(frozen=True)
class Link:
    """Cost of moving a tensor from one device to another: ``latency_s + bytes * s_per_byte``."""

    latency_s: float
    s_per_byte: float = 0.0

    def seconds(self, nbytes: int) -> float:
        """Time to move ``nbytes``."""
        return self.latency_s + nbytes * self.s_per_byte


@dataclass(frozen=True)
class SubgraphCosts:
    """What the placement needs to know, measured.

    Attributes
    ----------
    seconds : tuple[tuple[float, ...], ...]
        ``seconds[s][d]``: subgraph ``s`` compiled standalone and run on device ``d``.
    edges : tuple[tuple[int, int, int], ...]
        ``(src, dst, bytes)``: subgraph ``dst`` reads ``bytes`` that ``src`` makes; ``src`` is
        :data:`INPUTS` for graph inputs, ``dst`` is :data:`OUTPUTS` for graph outputs. Subgraphs
        are numbered in a topological order.
    links : Mapping[tuple[int, int], Link]
        ``(from device, to device)`` -> link cost, for every ordered pair of distinct devices.
    phase : tuple[int, ...]
        The phase of each subgraph (consecutive; a multi-path phase has several subgraphs).
    """

    seconds: tuple[tuple[float, ...], ...]
    edges: tuple[tuple[int, int, int], ...]
    links: Mapping[tuple[int, int], Link]
    phase: tuple[int, ...]

    @property
    def n_subgraphs(self) -> int:
        """Number of subgraphs."""
        return len(self.seconds)

    @property
    def n_devices(self) -> int:
        """Number of devices."""
        return len(self.seconds[0]) if self.seconds else 0

    def move_s(self, src: int, dst: int, nbytes: int) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to ``dst`` (0 on one device)."""
        return 0.0 if src == dst else self.links[(src, dst)].seconds(nbytes)


Assignment = tuple[int, ...]
"""Device index of each subgraph."""


@dataclass(frozen=True)
class Slot:
    """One subgraph in the predicted schedule."""

    subgraph: int
    device: int
    start_s: float
    end_s: float


def schedule(costs: SubgraphCosts, assignment: Assignment) -> tuple[list[Slot], float]:
    """The predicted run: each subgraph's device and times, and the end-to-end seconds.

    Among subgraphs whose inputs are done, the one that can start first goes first (ties: the
    lower index), which is what the runtime's dispatch on readiness does.
    """
    n = costs.n_subgraphs
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for src, dst, nbytes in costs.edges:
        if dst != OUTPUTS:
            preds[dst].append((src, nbytes))
    free = [0.0] * costs.n_devices
    end: dict[int, float] = {}
    slots: list[Slot] = []
    left = set(range(n))
    while left:
        best = None
        for s in sorted(left):
            if any(p != INPUTS and p not in end for p, _ in preds[s]):
                continue
            d = assignment[s]
            ready = max(
                [
                    (0.0 if p == INPUTS else end[p])
                    + costs.move_s(HOME if p == INPUTS else assignment[p], d, b)
                    for p, b in preds[s]
                ],
                default=0.0,
            )
            start = max(ready, free[d])
            if best is None or start < best[0]:
                best = (start, s)
        if best is None:
            raise ValueError("schedule: the subgraph edges have a cycle")
        start, s = best
        d = assignment[s]
        end[s] = free[d] = start + costs.seconds[s][d]
        slots.append(Slot(s, d, start, end[s]))
        left.remove(s)
    total = max(
        [
            end[src] + costs.move_s(assignment[src], HOME, b)
            for src, dst, b in costs.edges
            if dst == OUTPUTS and src != INPUTS
        ]
        + [max(end.values(), default=0.0)]
    )
    return slots, total


def predicted_s(costs: SubgraphCosts, assignment: Assignment) -> float:
    """Predicted end-to-end seconds of ``assignment``."""
    return schedule(costs, assignment)[1]


def _critical_path(costs: SubgraphCosts) -> list[int]:
    """The subgraphs of the longest path by their fastest time (copies not counted)."""
    best = [min(row) for row in costs.seconds]
    succ: dict[int, list[int]] = {s: [] for s in range(costs.n_subgraphs)}
    for src, dst, _ in costs.edges:
        if src != INPUTS and dst != OUTPUTS:
            succ[src].append(dst)
    length: dict[int, float] = {}
    nxt: dict[int, int | None] = {}
    for s in reversed(range(costs.n_subgraphs)):
        tail = max(succ[s], key=lambda t: length[t], default=None)
        length[s] = best[s] + (length[tail] if tail is not None else 0.0)
        nxt[s] = tail
    if not length:
        return []
    s: int | None = max(length, key=lambda k: (length[k], -k))
    path = []
    while s is not None:
        path.append(s)
        s = nxt[s]
    return path


def greedy(costs: SubgraphCosts) -> Assignment:
    """Steps 1 and 2: the critical path on its fastest devices, then the rest, longest first,
    each on the device that grows the predicted time least (subgraphs not yet placed count on
    their fastest device)."""
    fastest = [min(range(costs.n_devices), key=row.__getitem__) for row in costs.seconds]
    assignment = list(fastest)
    fixed = set(_critical_path(costs))
    rest = sorted(
        (s for s in range(costs.n_subgraphs) if s not in fixed),
        key=lambda s: (-min(costs.seconds[s]), s),
    )
    for s in rest:
        options = []
        for d in range(costs.n_devices):
            assignment[s] = d
            options.append((predicted_s(costs, tuple(assignment)), d))
        assignment[s] = min(options)[1]
    return tuple(assignment)


@dataclass(frozen=True)
class Correction:
    """The outcome of step 3.

    Attributes
    ----------
    assignment : Assignment
        The best assignment measured.
    seconds : float
        Its measured seconds.
    trials : tuple[tuple[Assignment, float], ...]
        Every measurement, in order (the start first).
    """

    assignment: Assignment
    seconds: float
    trials: tuple[tuple[Assignment, float], ...]


def correct(
    costs: SubgraphCosts,
    start: Assignment,
    measure: Callable[[Assignment], float],
    budget: int = 12,
    stop: Callable[[], bool] | None = None,
) -> Correction:
    """Step 3 (Algorithm 1), as a Kernighan-Lin pass per phase: from the best assignment so far,
    the move or swap of unlocked subgraphs the cost model ranks best is made and measured, its
    subgraphs locked, and so on until the phase's subgraphs are all locked; the best measured
    assignment is kept. Passes repeat while one finds a faster one. A move the model ranks well
    is made even when it measures slower, so the pass can climb out of a local minimum (KL's
    point); only measured gains are kept. ``budget`` caps the measurements (the start included);
    ``stop``, asked before each measurement after the start's, ends the correction early (its
    time is up) with the best assignment measured so far.
    """
    if budget < 1:
        raise ValueError(f"correct: budget must be >= 1, got {budget}")
    measured: dict[Assignment, float] = {}
    trials: list[tuple[Assignment, float]] = []

    def timed(a: Assignment) -> float:
        if a not in measured:
            measured[a] = measure(a)
            trials.append((a, measured[a]))
        return measured[a]

    best = tuple(start)
    best_s = timed(best)
    groups = [
        [s for s in range(costs.n_subgraphs) if costs.phase[s] == p]
        for p in sorted(set(costs.phase))
    ]

    def more() -> bool:
        return len(measured) < budget and not (stop and stop())

    gain = True
    while gain and more():
        gain = False
        for group in groups:
            current, unlocked = best, set(group)
            while unlocked and more():
                candidates = list(_moves(current, sorted(unlocked), costs.n_devices))
                if not candidates:
                    break
                moved, current = min(candidates, key=lambda c: (predicted_s(costs, c[1]), c[1]))
                unlocked -= set(moved)
                if timed(current) < best_s:
                    best, best_s, gain = current, measured[current], True
    return Correction(best, best_s, tuple(trials))


def _moves(a: Assignment, movable: list[int], n_devices: int):
    """Every move of one subgraph to another device and every swap of two on different devices."""
    for s in movable:
        for d in range(n_devices):
            if d != a[s]:
                yield (s,), (*a[:s], d, *a[s + 1 :])
    for s, t in itertools.combinations(movable, 2):
        if a[s] != a[t]:
            b = list(a)
            b[s], b[t] = a[t], a[s]
            yield (s, t), tuple(b)


def start_point(costs: SubgraphCosts, exact_limit: int = 4096) -> tuple[str, Assignment]:
    """Where the correction starts: Greedy (steps 1-2), or the cost model's optimum by enumeration
    (the paper's Ideal) when there are at most ``exact_limit`` assignments and it is predicted
    faster. Greedy and a correction that moves one or two subgraphs at a time can stop on a plateau
    short of the optimum (found by the brute-force test on four subgraphs); where enumeration is
    cheap it costs no measurement, and the correction still judges by measured time."""
    start = greedy(costs)
    if costs.n_devices**costs.n_subgraphs <= exact_limit:
        best = ideal(costs, exact_limit)
        if predicted_s(costs, best) < predicted_s(costs, start):
            return "ideal", best
    return "greedy", start


def single(costs: SubgraphCosts, device: int) -> Assignment:
    """Everything on one device."""
    return (device,) * costs.n_subgraphs


def round_robin(costs: SubgraphCosts) -> Assignment:
    """Subgraphs alternate between devices in topological order (paper's Round-robin)."""
    return tuple(s % costs.n_devices for s in range(costs.n_subgraphs))


def random_assignment(costs: SubgraphCosts, seed: int = 0) -> Assignment:
    """Each subgraph on a device drawn at random (paper's Random)."""
    rng = random.Random(seed)
    return tuple(rng.randrange(costs.n_devices) for _ in range(costs.n_subgraphs))


def ideal(costs: SubgraphCosts, limit: int = 1 << 16) -> Assignment:
    """The predicted optimum by enumeration (paper's Ideal), for up to ``limit`` assignments.

    Raises
    ------
    ValueError
        When ``n_devices ** n_subgraphs`` exceeds ``limit``.
    """
    count = costs.n_devices**costs.n_subgraphs
    if count > limit:
        raise ValueError(
            f"ideal: {costs.n_devices}^{costs.n_subgraphs} = {count} assignments exceed {limit}"
        )
    every = itertools.product(range(costs.n_devices), repeat=costs.n_subgraphs)
    return min(every, key=lambda a: (predicted_s(costs, a), a))


def baselines(costs: SubgraphCosts, seed: int = 0) -> dict[str, Assignment]:
    """The paper's comparison points that need no measurement: each single device, Round-robin,
    Random, Greedy (steps 1-2) and, where enumeration is feasible, Ideal."""
    out = {f"single {d}": single(costs, d) for d in range(costs.n_devices)}
    out |= {
        "round-robin": round_robin(costs),
        "random": random_assignment(costs, seed),
        "greedy": greedy(costs),
    }
    if costs.n_devices**costs.n_subgraphs <= 1 << 16:
        out["ideal"] = ideal(costs)
    return out


def uniform_links(n_devices: int, link: Link) -> dict[tuple[int, int], Link]:
    """The same link between every ordered pair of distinct devices."""
    return {(a, b): link for a, b in itertools.permutations(range(n_devices), 2)}


def devices_used(assignment: Sequence[int]) -> list[int]:
    """The devices an assignment uses, in index order."""
    return sorted(set(assignment))
