"""EdgePipe on tvm-hetero: a model's layers, their measured costs on each kind of device, the
links of the cluster, and the partition as a :class:`PipelinePlan` that ``api.compile`` builds.

The pure part is :mod:`tvm_hetero.plan.edgepipe` (the DP and the baselines); this module measures
what it consumes. A *layer* is the operators between two places where the graph can be cut with a
single tensor crossing (in a transformer, each residual add), or, in a model with hand-placed
``stage_boundary`` marks, between two marks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.costmodel.transfer import TransferFit
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.devices.discover import local_class
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.markers import is_stage_boundary
from tvm_hetero.ir.opgraph import INPUT_PREFIX, OpGraph
from tvm_hetero.plan import edgepipe
from tvm_hetero.plan.edgepipe import Partition, PipelineProblem
from tvm_hetero.plan.pipeline_plan import PipelinePlan
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import DEFAULT_DB, Profiler, profiler_for
from tvm_hetero.runtime.measure import PROFILE_CONFIG, MeasureConfig, for_device
from tvm_hetero.runtime.timer import close_runners, runners_for
from tvm_hetero.strategies.duet.planner import attach_side_ops
from tvm_hetero.strategies.eop.planner import crossings

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``."""


@dataclass(frozen=True)
class Layers:
    """A model cut into layers.

    Attributes
    ----------
    ops : tuple[tuple[str, ...], ...]
        Operator ids of each layer, in program order.
    out_bytes : tuple[int, ...]
        Bytes crossing the cut after each layer (the last: the outputs).
    in_bytes : int
        Bytes of the model's inputs.
    weight_bytes, work_bytes : tuple[int, ...]
        Each layer's weights, and its largest operator output.
    labels : tuple[str, ...]
        A short name per layer (its operator with the most FLOPs).
    marked : bool
        Whether the cuts are hand-placed marks.
    """

    ops: tuple[tuple[str, ...], ...]
    out_bytes: tuple[int, ...]
    in_bytes: int
    weight_bytes: tuple[int, ...]
    work_bytes: tuple[int, ...]
    labels: tuple[str, ...]
    marked: bool = False

    def __len__(self) -> int:
        return len(self.ops)


def pipeline_layers(graph: OpGraph) -> Layers:
    """The layers of ``graph``: cut after every operator where one tensor alone is live (what
    the later operators and the outputs still read), or only after the marks when there are."""
    work, from_weights, dead = graph.activation_ops()
    position = {n: i for i, n in enumerate(work)}
    last_use: dict[str, int] = {}  # tensor -> position of its last reader in work
    size: dict[str, int] = {}
    for u, v, name, data in graph.graph.edges(keys=True, data=True):
        if u in position and v in position:
            last_use[name] = max(last_use.get(name, -1), position[v])
            size[name] = int(data["bytes"] or 0)
    end = len(work)
    for out in graph.outputs:
        if out in position:
            for port, t in enumerate(graph.node(out).outputs):
                last_use[f"{out}:{port}"] = end
                size[f"{out}:{port}"] = int(t.nbytes or 0)
    inputs_read = {
        c for i in graph.inputs if not i.is_param for c in i.consumers if c in position
    }  # fmt: skip
    last_input = max((position[c] for c in inputs_read), default=-1)
    marks = [p for p, n in enumerate(work) if is_stage_boundary(graph.bindings[n].call)]
    crossing: list[int] = []
    cuts: list[int] = []
    for p, n in enumerate(work[:-1]):
        live = [
            t for t, last in last_use.items() if last > p and position[t.rsplit(":", 1)[0]] <= p
        ]
        if marks:
            allowed = p in marks
        else:
            allowed = len(live) == 1 and p >= last_input and not n.startswith(INPUT_PREFIX)
        if allowed:
            cuts.append(p)
            crossing.append(sum(size[t] for t in live))
    bounds = [0, *(c + 1 for c in cuts), end]
    where = {n: k for k in range(len(bounds) - 1) for n in work[bounds[k] : bounds[k + 1]]}
    attach_side_ops(graph, where, dead, from_weights)
    groups: list[list[str]] = [[] for _ in range(len(bounds) - 1)]
    for n in graph.topo_order():
        groups[where[n]].append(n)
    outputs = sum(size.get(t, 0) for t, last in last_use.items() if last == end)
    nodes = [[graph.node(n) for n in g] for g in groups]
    return Layers(
        tuple(tuple(g) for g in groups),
        (*crossing, outputs),
        sum(int(i.tensor.nbytes or 0) for i in graph.inputs if not i.is_param and i.tensor),
        tuple(sum(x.param_bytes for x in g) for g in nodes),
        tuple(max((_out_bytes(x) for x in g), default=0) for g in nodes),
        tuple(_label(g) for g in nodes),
        bool(marks),
    )  # fmt: skip


def _out_bytes(node: Any) -> int:
    return sum(int(t.nbytes or 0) for t in node.outputs)


def _label(nodes: Sequence[Any]) -> str:
    flops: dict[str, int] = {}
    for x in nodes:
        op = x.op.split(".")[-1]
        flops[op] = flops.get(op, 0) + (x.flops or 0)
    return max(sorted(flops), key=flops.__getitem__) if flops else "-"


# -- costs ---------------------------------------------------------------------------------


def layer_seconds(
    model: Model, layers: Layers, devices: Sequence[DeviceSpec], db: str | Path | None = None,
    options: BuildOptions | None = None, progress: Progress | None = None,
    config: MeasureConfig | None = None,
) -> list[list[float]]:  # fmt: skip
    """``seconds[d][l]``: layer ``l`` compiled standalone as the build compiles it (fusion, the
    build's schedules, weights folded) and timed on one device of ``devices[d]``'s class, on
    its own worker for a cluster device. Layers alike but for their weights are measured once."""
    classes: dict[str, DeviceSpec] = {}
    for d in devices:
        classes.setdefault(local_class(d), d)
    runners = runners_for(list(classes.values()))
    database = ProfileDB(db or DEFAULT_DB)
    config = config or PROFILE_CONFIG
    measured: dict[str, list[float]] = {}
    total, done = len(classes) * len(layers), 0
    try:
        for key, device in classes.items():
            timing = for_device(config, device.cpu_quota)  # the rate a quota sustains
            profiler = Profiler(database, runners[device.name], timing, options or BuildOptions())
            row = []
            for ops in layers.ops:
                row.append(profiler.profile_subgraph(model.mod, ops, device).median_s)
                done += 1
                if progress:
                    progress(f"layers on {device.name}", done, total)
            measured[key] = row
    finally:
        close_runners(runners)
    return [measured[local_class(d)] for d in devices]


def link_table(
    devices: Sequence[DeviceSpec], cluster: ClusterSpec | None,
    local: Mapping[tuple[int, int], TransferFit] | None = None,
) -> tuple[list[list[float]], list[list[float]]]:  # fmt: skip
    """Bandwidth (bytes/s) and latency (s) between every ordered pair of devices: along the
    cluster's links (the route an emulated cluster takes: fewest hops; the slowest link's
    bandwidth, the latencies summed), or, for two workers of one process, the crossing
    ``local[(a, b)]`` measured there (EOP's :func:`~tvm_hetero.strategies.eop.planner.crossings`;
    free until it is).

    Raises
    ------
    ValueError
        For two devices in different processes that the cluster does not join.
    """
    n = len(devices)
    bandwidth = [[math.inf] * n for _ in range(n)]
    latency = [[0.0] * n for _ in range(n)]
    for a, src in enumerate(devices):
        for b, dst in enumerate(devices):
            if a == b:
                continue
            if src.colocated(dst):
                fit = (local or {}).get((a, b))
                if fit is not None:
                    bandwidth[a][b], latency[a][b] = fit.bandwidth_bps, fit.latency_s
                continue
            found = cluster.path_rate(src.name, dst.name) if cluster else None
            if found is None:
                raise ValueError(
                    f"no link joins {src.name} and {dst.name}: give a cluster file (--cluster) "
                    "whose links join them"
                )
            bandwidth[a][b], latency[a][b] = found
    return bandwidth, latency


def problem_of(
    layers: Layers, seconds: Sequence[Sequence[float]], devices: Sequence[DeviceSpec],
    bandwidth: Sequence[Sequence[float]], latency: Sequence[Sequence[float]],
) -> PipelineProblem:  # fmt: skip
    """The planner's input."""
    return PipelineProblem(
        tuple(tuple(r) for r in seconds), layers.out_bytes, layers.in_bytes, layers.weight_bytes,
        layers.work_bytes, tuple(d.memory_bytes for d in devices),
        tuple(tuple(r) for r in bandwidth), tuple(tuple(r) for r in latency),
        tuple(d.name for d in devices),
    )  # fmt: skip


def to_plan(
    layers: Layers, problem: PipelineProblem, part: Partition, strategy: str
) -> PipelinePlan:
    """The plan of a partition: each stage's operators on its device, with predicted costs."""
    ops = [tuple(op for lay in layers.ops[s.first : s.last + 1] for op in lay) for s in part.stages]
    return PipelinePlan(
        tuple(problem.names[s.device] for s in part.stages),
        tuple(ops),
        tuple((s.first, s.last) for s in part.stages),
        strategy,
        part.period_s if math.isfinite(part.period_s) else None,
        tuple(s.compute_s for s in part.stages),
        tuple(s.send_s for s in part.stages),
        tuple(s.memory_bytes for s in part.stages),
    )  # fmt: skip


@dataclass(frozen=True)
class EdgePipeResult:
    """EdgePipe's plan and what it was made from: layers, the problem, the partition, and the
    baselines (GPipe and PipeDream over random device orders)."""

    plan: PipelinePlan
    layers: Layers
    problem: PipelineProblem
    partition: Partition
    baselines: dict[str, list[Partition]]
    search_s: float


def plan_with_measurements(
    model: Model, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None = None,
    db: str | Path | None = None, options: BuildOptions | None = None,
    progress: Progress | None = None, orders: int = 10, seed: int = 0,
    config: MeasureConfig | None = None,
) -> EdgePipeResult:  # fmt: skip
    """EdgePipe end to end: layers, their costs on each class of device, the links, the DP, and
    GPipe's and PipeDream's partitions over ``orders`` random device orders."""
    import time

    layers = pipeline_layers(OpGraph.from_module(model.mod))
    # what needs no measuring is checked first: links, and that some partition fits memory
    bandwidth, latency = link_table(devices, cluster)
    zero = [[0.0] * len(layers) for _ in devices]
    edgepipe.edgepipe(problem_of(layers, zero, devices, bandwidth, latency))
    seconds = layer_seconds(model, layers, devices, db, options, progress, config)
    local = crossings(devices, profiler_for(db, options), local_only=True)
    bandwidth, latency = link_table(devices, cluster, local)
    problem = problem_of(layers, seconds, devices, bandwidth, latency)
    start = time.perf_counter()
    partition = edgepipe.edgepipe(problem)
    search_s = time.perf_counter() - start
    baselines = {
        "gpipe": [],
        "pipedream": [],
    }  # type: dict[str, list[Partition]]
    for order in edgepipe.random_orders(len(devices), orders, seed):
        baselines["gpipe"].append(edgepipe.gpipe(problem, order))
        baselines["pipedream"].append(edgepipe.pipedream(problem, order))
    plan = to_plan(layers, problem, partition, "edgepipe")
    return EdgePipeResult(plan, layers, problem, partition, baselines, search_s)
