"""DUET on tvm-hetero: a model's phases as subgraphs, their compiler-aware costs, and the placement
corrected by end-to-end runs of the concurrent runtime.

The pure parts are :mod:`tvm_hetero.plan.phases` (the phases) and :mod:`tvm_hetero.plan.duet` (the
placement); this module measures what they consume and turns an assignment into a
:class:`SubgraphPlan` that ``api.compile`` builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.devices.discover import merged_cpu
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.opgraph import INPUT_PREFIX, OpGraph
from tvm_hetero.plan import duet
from tvm_hetero.plan.duet import INPUTS, OUTPUTS, Assignment, Link, SubgraphCosts
from tvm_hetero.plan.phases import phases
from tvm_hetero.plan.subgraph_plan import SubgraphPlan
from tvm_hetero.profiling.profiler import Profiler, profiler_for
from tvm_hetero.strategies.base import Pace
from tvm_hetero.strategies.eop.planner import crossings

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``."""


@dataclass(frozen=True)
class DuetGraph:
    """A model cut into DUET's subgraphs.

    Attributes
    ----------
    subgraphs : tuple[tuple[str, ...], ...]
        Operator ids of each subgraph, in phase order (a topological order of the subgraphs).
    phase : tuple[int, ...]
        Phase of each subgraph.
    branch : tuple[int, ...]
        Index of each subgraph among its phase's branches.
    edges : tuple[tuple[int, int, int], ...]
        ``(src, dst, bytes)`` between subgraphs, from the inputs (``src`` = -1) and to the
        outputs (``dst`` = -1); one edge per tensor and reader.
    """

    subgraphs: tuple[tuple[str, ...], ...]
    phase: tuple[int, ...]
    branch: tuple[int, ...]
    edges: tuple[tuple[int, int, int], ...]

    def label(self, s: int, graph: OpGraph) -> str:
        """A short name: phase, branch, the operator type with the most FLOPs, and the size."""
        flops: dict[str, int] = {}
        for n in self.subgraphs[s]:
            node = graph.node(n)
            op = node.op.split(".")[-1]
            flops[op] = flops.get(op, 0) + (node.flops or 0)
        top = max(sorted(flops), key=flops.__getitem__) if flops else "-"
        return f"p{self.phase[s]}.{self.branch[s]} {top} ({len(self.subgraphs[s])} ops)"


def duet_graph(graph: OpGraph) -> DuetGraph:
    """Phases of ``graph`` as subgraphs. Operators computed from weights alone (transposes of
    weights) are left out of the phase analysis and join the subgraph that reads them: the build
    folds them into constants, and each unit keeps its own copy. Operators no output depends on
    (a torch export's unused max-pool indices) are left out too, and join their producer's
    subgraph: as sinks of their own they would hide every cut point after them."""
    work, from_weights, dead = graph.activation_ops()
    dag = nx.DiGraph()
    dag.add_nodes_from(work)
    dag.add_edges_from((u, v) for u, v in graph.graph.edges() if u in dag and v in dag)
    cut = phases(dag, work)
    members = [list(b) for p in cut for b in p.branches]
    phase = tuple(k for k, p in enumerate(cut) for _ in p.branches)
    branch = tuple(j for p in cut for j, _ in enumerate(p.branches))
    where = {n: s for s, nodes in enumerate(members) for n in nodes}
    attach_side_ops(graph, where, dead, from_weights)
    subgraphs = tuple(_grouped(graph, where, len(members)))
    return DuetGraph(subgraphs, phase, branch, _edges(graph, where))


def attach_side_ops(
    graph: OpGraph, where: dict[str, int], dead: Sequence[str], from_weights: set[str]
) -> None:
    """Give the operators :meth:`OpGraph.activation_ops` sets aside a group in ``where``: what
    no output reads joins its producer's, a weight computation its first reader's."""
    for n in dead:
        where[n] = max((where[u] for u in graph.graph.predecessors(n) if u in where), default=0)
    for n in reversed(graph.topo_order()):
        if n in from_weights:
            where[n] = min((where[v] for v in graph.graph.successors(n) if v in where), default=0)


def _grouped(graph: OpGraph, where: dict[str, int], groups: int) -> list[tuple[str, ...]]:
    """The operators of each group, in program order."""
    out: list[list[str]] = [[] for _ in range(groups)]
    for n in graph.topo_order():
        out[where[n]].append(n)
    return [tuple(g) for g in out]


def _edges(graph: OpGraph, where: dict[str, int]) -> tuple[tuple[int, int, int], ...]:
    edges: dict[tuple[int, int, str], int] = {}
    for u, v, name, data in graph.graph.edges(keys=True, data=True):
        if where[u] != where[v]:
            edges[(where[u], where[v], name)] = int(data["bytes"] or 0)
    for i in graph.inputs:
        if i.is_param or i.tensor is None:
            continue
        for c in i.consumers:
            edges[(INPUTS, where[c], i.name)] = int(i.tensor.nbytes or 0)
    for out in graph.outputs:
        if not out.startswith(INPUT_PREFIX):
            for port, t in enumerate(graph.node(out).outputs):
                edges[(where[out], OUTPUTS, f"{out}:{port}")] = int(t.nbytes or 0)
    return tuple((s, d, b) for (s, d, _), b in edges.items())


def links(
    devices: Sequence[DeviceSpec], profiler: Profiler, cluster: ClusterSpec | None = None
) -> dict[tuple[int, int], Link]:
    """The cost of passing a tensor between each ordered pair of devices (EOP's
    :func:`~tvm_hetero.strategies.eop.planner.crossing`: the runtime's handoff between workers
    of one process, plus the bytes at the fitted copy bandwidth where a copy is made; between
    machines the ``cluster``'s path)."""
    return {
        pair: Link(fit.latency_s, 1.0 / fit.bandwidth_bps)
        for pair, fit in crossings(devices, profiler, cluster=cluster).items()
    }


def subgraph_costs(
    model: Model, devices: Sequence[DeviceSpec], dg: DuetGraph, profiler: Profiler,
    progress: Progress | None = None, cluster: ClusterSpec | None = None,
) -> SubgraphCosts:  # fmt: skip
    """Every subgraph compiled standalone as the build compiles it and timed on every device
    (a remote one on its worker; records kept in the profiler's database), and the links
    between the devices (:func:`links`)."""
    total = len(dg.subgraphs) * len(devices)
    seconds = []
    for s, nodes in enumerate(dg.subgraphs):
        row = []
        for d, device in enumerate(devices):
            row.append(profiler.profile_subgraph(model.mod, nodes, device).median_s)
            if progress:
                progress("subgraphs", s * len(devices) + d + 1, total)
        seconds.append(tuple(row))
    return SubgraphCosts(tuple(seconds), dg.edges, links(devices, profiler, cluster), dg.phase)


def to_plan(
    dg: DuetGraph, devices: Sequence[DeviceSpec], assignment: Assignment, strategy: str,
    predicted_s: float | None = None, measured_s: float | None = None,
) -> SubgraphPlan:  # fmt: skip
    """The plan of ``assignment``; a plan using only one device names only that device."""
    names = tuple(d.name for d in devices)
    used = duet.devices_used(assignment)
    if len(used) == 1:
        return SubgraphPlan(
            (names[used[0]],), dg.subgraphs, (0,) * len(assignment), dg.phase, strategy,
            predicted_s, measured_s,
        )  # fmt: skip
    return SubgraphPlan(
        names, dg.subgraphs, tuple(assignment), dg.phase, strategy, predicted_s, measured_s
    )


@dataclass
class EndToEnd:
    """Times an assignment as compiled and run end to end on the concurrent runtime
    (:meth:`Profiler.profile_run`: kept in the profile database, and with an offline runner
    exported for the box to run, a placeholder meanwhile); each assignment once."""

    model: Model
    devices: Sequence[DeviceSpec]
    graph: DuetGraph
    profiler: Profiler
    repeat: int = 30
    seconds: dict[Assignment, float] = field(default_factory=dict)
    progress: Progress | None = None
    expected_runs: int = 0
    pace: Pace = field(default_factory=lambda: Pace(None))

    def __call__(self, assignment: Assignment) -> float:
        """Measured seconds of ``assignment``."""
        if assignment not in self.seconds:
            plan = to_plan(self.graph, self.devices, assignment, "trial")
            self.seconds[assignment] = self.time_plan(plan)
        return self.seconds[assignment]

    def time_plan(self, plan: SubgraphPlan, devices: Sequence[DeviceSpec] | None = None) -> float:
        """Median seconds of ``plan``'s runs on ``devices`` (default: the plan's own, by name)."""
        from tvm_hetero.build.compiled import in_plan_order

        devices = devices or in_plan_order(self.devices, plan)
        with self.pace.piece():
            record = self.profiler.profile_run(self.model, devices, plan, repeat=self.repeat)
        if self.progress:
            runs = self.pace.pieces
            self.progress("end-to-end runs (compile and time)", runs, max(self.expected_runs, runs))
        return record.median_s


@dataclass(frozen=True)
class DuetResult:
    """DUET's plan and what it was made from.

    Attributes
    ----------
    plan : SubgraphPlan
        The kept plan: DUET's, or the fastest single device when that measured faster.
    graph : DuetGraph
        The subgraphs.
    costs : SubgraphCosts
        Their measured costs.
    start : str
        Where the correction started (``greedy`` or ``ideal``).
    correction : duet.Correction
        Every measured trial.
    singles : dict[str, float]
        Measured seconds of each single-device build (by device name); those the time left
        did not reach are absent.
    cut_short : bool
        Whether the time left ended the correction or the singles early.
    """

    plan: SubgraphPlan
    graph: DuetGraph
    costs: SubgraphCosts
    start: str
    correction: duet.Correction
    singles: dict[str, float]
    cut_short: bool = False


def measure_costs(
    model: Model, devices: Sequence[DeviceSpec], profiler: Profiler,
    progress: Progress | None = None, cluster: ClusterSpec | None = None,
) -> tuple[DuetGraph, SubgraphCosts]:  # fmt: skip
    """DUET's steps before any end-to-end run: the phases' subgraphs and their compiler-aware
    costs on every device, links included (what an offline box times in its first round)."""
    dg = duet_graph(OpGraph.from_module(model.mod))
    return dg, subgraph_costs(model, devices, dg, profiler, progress, cluster)


def place(
    model: Model, devices: Sequence[DeviceSpec], dg: DuetGraph, costs: SubgraphCosts,
    profiler: Profiler, budget: int = 12, repeat: int = 30, progress: Progress | None = None,
    time_left: Callable[[], float | None] | None = None,
) -> DuetResult:  # fmt: skip
    """Greedy (or Ideal where enumeration is cheap) corrected by at most ``budget`` end-to-end
    runs, then the fallback: every single device (and, for CPU workers, one worker on all their
    cores) run, and the fastest kept. Each run is ``repeat`` samples (:class:`EndToEnd`).

    With ``time_left`` (seconds, None for no limit) no run starts that would end past it, by
    the runs' average so far: the correction keeps the best it measured and the singles not
    reached are left out (a search that asks times every device alone itself)."""
    label, start = duet.start_point(costs)
    timer = EndToEnd(model, devices, dg, profiler, repeat, progress=progress)
    timer.expected_runs = budget + len(devices) + (merged_cpu(devices) is not None)
    timer.pace = Pace(time_left)
    stopped = []

    def stop() -> bool:
        stopped.append(not timer.pace.room())
        return stopped[-1]

    fixed = duet.correct(costs, start, timer, budget, stop)
    singles = _singles(dg, devices, timer)
    cut_short = any(stopped) or len(singles) < len(devices) + (merged_cpu(devices) is not None)
    assignment, measured = fixed.assignment, fixed.seconds
    predicted = duet.predicted_s(costs, assignment)
    best_single = min(singles, key=singles.__getitem__, default=None)
    if len(duet.devices_used(assignment)) > 1 and (
        best_single is None or measured < singles[best_single]
    ):
        plan = to_plan(dg, devices, assignment, "duet", predicted, measured)
    elif best_single is None:  # the correction's best runs on one device
        plan = to_plan(dg, devices, assignment, "duet-fallback", None, measured)
    else:
        zeros = (0,) * len(dg.subgraphs)
        plan = SubgraphPlan(
            (best_single,), dg.subgraphs, zeros, dg.phase, "duet-fallback", None,
            singles[best_single],
        )  # fmt: skip
    return DuetResult(plan, dg, costs, label, fixed, singles, cut_short)


def plan_with_measurements(
    model: Model, devices: Sequence[DeviceSpec], db: str | Path | None = None,
    options: BuildOptions | None = None, budget: int = 12, progress: Progress | None = None,
    repeat: int = 30, profiler: Profiler | None = None,
) -> DuetResult:  # fmt: skip
    """DUET end to end (:func:`measure_costs`, then :func:`place`), measured by ``profiler``
    (default: EOP's, records in ``db``, built with ``options``)."""
    profiler = profiler or profiler_for(db, options)
    dg, costs = measure_costs(model, devices, profiler, progress)
    return place(model, devices, dg, costs, profiler, budget, repeat, progress)


def _singles(dg: DuetGraph, devices: Sequence[DeviceSpec], timer: EndToEnd) -> dict[str, float]:
    """Measured seconds of each device alone, and of the CPU workers merged into one; one
    already measured by the correction is not run again, and none is run past the timer's
    time left (its :class:`Pace`)."""
    out = {}
    for d, device in enumerate(devices):
        alone = (d,) * len(dg.subgraphs)
        if alone in timer.seconds or timer.pace.room():
            out[device.name] = timer(alone)
    merged = merged_cpu(devices)
    if merged is not None and timer.pace.room():
        plan = SubgraphPlan(
            (merged.name,), dg.subgraphs, (0,) * len(dg.subgraphs), dg.phase, "single"
        )
        out[merged.name] = timer.time_plan(plan, [merged])
    return out
