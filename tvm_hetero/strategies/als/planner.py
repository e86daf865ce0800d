"""Lee et al. on tvm-hetero's graph view: the DCG of a model and the profiling runs it needs."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.build.vdevices import vdevices_of
from tvm_hetero.devices.discover import device_name, local_class
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.opgraph import INPUT_PREFIX, OpGraph
from tvm_hetero.pipelines import get_pipeline
from tvm_hetero.plan.als import (
    Costs,
    als_assignment,
    best_priority_assignment,
    exact_assignment,
)
from tvm_hetero.plan.dcg import DCG, END, START, CGEdge, DAKey, build_dcg
from tvm_hetero.plan.placement import Placement
from tvm_hetero.plan.profiling_paths import ProfilingRun, profiling_runs
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.strategies.base import (
    OutOfTime,
    SearchCosts,
    alone_seconds,
    check_time,
    end_to_end_seconds,
)

PIM_OPS = frozenset(
    {"relax.matmul", "relax.add", "relax.subtract", "relax.multiply", "relax.divide"}
)
"""What the paper's PIM device runs: matrix products and element-wise arithmetic."""


def dcg_of(
    graph: OpGraph,
    devices: Sequence[str],
    capability: Mapping[str, frozenset[str] | None] | None = None,
) -> DCG:
    """The DCG of an operator graph: one edge per tensor use, graph inputs from the start node and
    graph outputs to the end node (both on the home device, ``devices[0]``)."""
    ops = [(n.node_id, n.op) for n in graph.nodes]
    edges = []
    for u, v, data in graph.graph.edges(data=True):
        t = data["tensor"]
        edges.append(CGEdge(u, v, t.dtype, t.numel or 0))
    for inp in graph.inputs:
        if inp.is_param or inp.tensor is None:
            continue
        for consumer in dict.fromkeys(inp.consumers):
            edges.append(CGEdge(START, consumer, inp.tensor.dtype, inp.tensor.numel or 0))
    for out in graph.outputs:
        if out.startswith(INPUT_PREFIX):
            continue
        for t in graph.node(out).outputs:
            edges.append(CGEdge(out, END, t.dtype, t.numel or 0))
    return build_dcg(ops, edges, devices, capability)


def measure_costs(
    model: Model, devices: Sequence[DeviceSpec], dcg: DCG, runs: Sequence[ProfilingRun],
    profiler: Profiler | None = None, repeats: int = 3,
    progress: Callable[[str, int, int | None], None] | None = None,
    time_left: Callable[[], float | None] | None = None, costs: SearchCosts | None = None,
) -> Costs:  # fmt: skip
    """Execute the profiling runs for real and read node and DA-edge costs out of them
    (``progress(what, done, total)`` before each run). In a search (``time_left`` and its
    ``costs``), no run starts while the runs still to measure (those the database does not
    hold, each priced :meth:`SearchCosts.profiling_runs_s`) could not end before the search
    stops the strategy (:func:`check_time`): without every run there is no plan.

    Each run is the model placed by the run's assignment, built without fusion and timed with
    per-operator instrumentation (median of ``repeats`` runs; :meth:`Profiler.profile_op_times`,
    so a run is reused from the profile database, or exported when the devices are offline):
    operator ``o`` on device ``d`` gets its kernel time (pooled over the devices that compute
    as ``d`` does: :func:`pooled_by_class`), and every copy is filed under its DA key
    (median over copies sharing it; a DA edge no run performed costs what the nearest measured
    copy does: :func:`nearest_copy_s`). Operators without a kernel of their own (reshapes the
    VM does in place) cost 0. ``profiler`` defaults to EOP's (this process, its default database).
    """
    if profiler is None:
        from tvm_hetero.profiling.profiler import profiler_for

        profiler = profiler_for()
    node: dict[str, dict[int, list[float]]] = {o: {} for o in dcg.ops}
    edge: dict[DAKey, list[float]] = {}
    placed = [
        get_pipeline(
            "manual_placement", vdevices=vdevices_of(devices),
            assignment={o: d for o, d in run.assignment.items() if d != 0},
        )(model.mod)
        for run in runs
    ]  # fmt: skip
    missing = [] if costs is None else [
        not profiler.has_op_times(p, devices, repeats) for p in placed
    ]  # fmt: skip
    for k, run in enumerate(runs):
        if costs is not None:
            left = sum(missing[k:])
            check_time(time_left, costs.profiling_runs_s(left, repeats),
                       f"its {left} profiling run{'s' * (left != 1)} left")  # fmt: skip
        if progress:
            progress(f"profiling run {k + 1} of {len(runs)}", k, len(runs))
        record = profiler.profile_op_times(placed[k], devices, runs=repeats)
        times = record.extra["node_seconds"]
        for o in dcg.ops:
            node[o].setdefault(run.assignment[o], []).append(times.get(o, 0.0))
        for copy, (src, dst, dtype, elements) in record.extra["copies"].items():
            edge.setdefault(DAKey(src, dst, dtype, elements), []).append(times.get(copy, 0.0))
    measured = {k: float(np.median(v)) for k, v in edge.items()}
    return Costs(
        pooled_by_class(node, [local_class(d) for d in devices]),
        measured | {k: nearest_copy_s(k, measured) for k in dcg.da_edges() - set(measured)},
    )


def pooled_by_class(
    samples: Mapping[str, Mapping[int, Sequence[float]]], classes: Sequence[str]
) -> dict[str, dict[int, float]]:
    """Each operator's price on each device: the median of its samples on every device of that
    device's class (``classes``: :func:`~tvm_hetero.devices.discover.local_class`, the compute
    class and the kinds of a pinned device's cores), not of that device's alone.
    Devices of one class run a kernel at one rate; priced apart, each operator went to whichever
    twin's few samples happened to read lower, and the sum of those minima priced a plan that
    cut between two alike cores below either core alone (BERT at eight tokens over two cores,
    ``benchmarks/als/table3.py``: priced a twentieth to a tenth under the better core; run,
    level with it to a fifth over)."""
    prices = {}
    for o, per in samples.items():
        pooled: dict[str, list[float]] = {}
        for d, times in per.items():
            pooled.setdefault(classes[d], []).extend(times)
        prices[o] = {d: float(np.median(pooled[classes[d]])) for d in per}
    return prices


FUSED_PRICES = True
"""Price each device's operators at the rate its fused build runs the model
(:func:`fused_scales`), not as their unfused kernels sum."""
FUSED_SCALE_LIMITS = (0.25, 4.0)
"""The least and most :func:`fused_scales` gives a device: beyond them its fused run and its
profiling runs time different things, and neither is trusted."""


def fused_scales(
    model: Model, devices: Sequence[DeviceSpec], dcg: DCG, costs: Costs, profiler: Profiler,
    search: SearchCosts | None = None,
) -> dict[int, float]:  # fmt: skip
    """Per device that can run every operator: the model's fused build run on it alone
    (:func:`~tvm_hetero.strategies.base.alone_seconds`, as EOP levels its model of a device:
    the same records) over the sum of its operators' prices there, within
    :data:`FUSED_SCALE_LIMITS`. The profiling runs time each operator as its own kernel,
    unfused and timed one by one, so an element-wise step fused into the kernel before it is
    priced a pass over memory it does not make, and each kernel its timer; a device's prices
    drifted from its run by up to three tenths either way (``benchmarks/als/table3.py``: BERT
    at eight tokens over two cores, priced 1.29x and 0.77x the two cores' runs alone; levelled,
    1.14x and 1.08x: the table's runs are not the levelling's). None where the runs are
    exported for a box (``--offline``: no time here to scale by) or a run fails. One run a
    class of devices: their prices are pooled (:func:`pooled_by_class`), so one scale."""
    from tvm_hetero.runtime.timer import LocalRunner

    if not isinstance(profiler.runner, LocalRunner):
        return {}
    scales: dict[int, float] = {}
    by_class: dict[str, float | None] = {}
    low, high = FUSED_SCALE_LIMITS
    for d, device in enumerate(devices):
        prices = [costs.node[o].get(d) for o in dcg.ops]
        priced = sum(p for p in prices if p is not None)
        if None in prices or priced <= 0:
            continue
        kind = local_class(device)
        if kind not in by_class:
            try:
                run_s = alone_seconds(profiler, model, device, search)
            except RuntimeError:  # a build or run that failed (a device too small for it)
                run_s = None
            by_class[kind] = run_s
        run_s = by_class[kind]
        if run_s is not None:
            scales[d] = min(high, max(low, run_s / priced))
    return scales


def _time_for_fused_runs(
    count: int, time_left: Callable[[], float | None] | None, costs: SearchCosts | None
) -> bool:  # fmt: skip
    """Whether ``count`` devices' fused builds and runs (:func:`fused_scales`) could end in a
    search's time left; always outside a search. Without them the plan is priced unscaled, not
    dropped."""
    if costs is None:
        return True
    five = 5  # alone_seconds' runs at least
    try:
        check_time(time_left, costs.profiling_runs_s(count, five), "each device's fused runs")
    except OutOfTime:
        return False
    return True


def scaled_costs(costs: Costs, scales: Mapping[int, float]) -> Costs:
    """``costs`` with each device's operator times multiplied by its scale (copies as they
    were)."""
    node = {o: {d: t * scales.get(d, 1.0) for d, t in per.items()} for o, per in costs.node.items()}
    return Costs(node, costs.edge)


def nearest_copy_s(key: DAKey, measured: Mapping[DAKey, float]) -> float:
    """The cost of a DA edge that no profiling run performed (the build folded the copy away,
    or computed the tensor on both devices: an ONNX model's shape tensors): the measured copy of
    the nearest size in the same direction (in any direction when there is none), else 0."""
    size = key.elements * np.dtype(key.dtype).itemsize
    same = [k for k in measured if (k.src, k.dst) == (key.src, key.dst)] or list(measured)
    if not same:
        return 0.0
    near = min(same, key=lambda k: abs(k.elements * np.dtype(k.dtype).itemsize - size))
    return measured[near]


def plan_als(dcg: DCG, costs: Costs, exact: bool = False, min_gain: float = 0.0) -> Placement:
    """The optimal placement: the ALS DP (``exact=False``) or the MILP optimum.

    ``min_gain`` guards against gains inside the cost model's error: when the optimum is
    predicted less than this fraction faster than the best priority baseline (single devices
    included), that baseline is returned instead (strategy ``...-guarded``). Per-operator costs
    come from unfused runs, so a predicted gain of a few percent may not survive fusion.
    """
    if not 0 <= min_gain < 1:
        raise ValueError(f"plan_als: min_gain must be in [0, 1), got {min_gain}")
    assignment, seconds = (exact_assignment if exact else als_assignment)(dcg, costs)
    strategy = "als-exact" if exact else "als"
    if min_gain:
        baseline, base_s = best_priority_assignment(dcg, costs)
        if seconds > (1 - min_gain) * base_s:
            assignment, seconds, strategy = baseline, base_s, f"{strategy}-guarded"
    return Placement.of(dcg.devices, assignment, strategy, seconds)


def confirm_by_measurement(
    model: Model, devices: Sequence[DeviceSpec], plan: Placement, dcg: DCG, costs: Costs,
    options: BuildOptions | None = None, repeat: int = 15,
) -> tuple[Placement, dict[str, float]]:  # fmt: skip
    """Time ``plan`` and the best priority baseline end to end (fused builds, as deployed, in
    three interleaved rounds, ``repeat`` runs each in all) and keep the faster: the cost model
    sums operators measured unfused, so a predicted gain can vanish once the kernels are fused
    (DUET's fallback to the best single device, for ALS).

    Returns the kept placement (strategy ``...-fallback`` when the baseline won) and the measured
    seconds of both, keyed ``plan`` and ``baseline``.
    """
    assignment, base_s = best_priority_assignment(dcg, costs)
    baseline = Placement.of(dcg.devices, assignment, "priority", base_s)
    if dict(baseline.assignment) == dict(plan.assignment):
        return plan, {}
    pair = {"plan": (devices, plan), "baseline": (devices, baseline)}
    seconds = end_to_end_seconds(model, pair, options, repeat)
    if seconds["baseline"] < seconds["plan"]:
        kept = Placement(dcg.devices, baseline.assignment, f"{plan.strategy}-fallback", base_s)
        return kept, seconds
    return plan, seconds


@dataclass(frozen=True)
class AlsResult:
    """Lee et al.'s plan with what it was made from.

    Attributes
    ----------
    plan : Placement
        The kept placement (guarded and, if asked, confirmed by measurement).
    dcg : DCG
        The device-mapped graph.
    costs : Costs
        Node and DA-edge costs read from the profiling runs.
    runs : tuple[ProfilingRun, ...]
        The profiling runs executed.
    plan_s : float
        The planner's own time (ALS DP or MILP).
    confirm_s : dict[str, float]
        End-to-end seconds of the plan and the best baseline when confirmed, else empty.
    """

    plan: Placement
    dcg: DCG
    costs: Costs
    runs: tuple[ProfilingRun, ...]
    plan_s: float
    confirm_s: dict[str, float]


def plan_with_runs(
    model: Model, devices: Sequence[DeviceSpec], options: BuildOptions | None = None,
    pim: str | None = None, exact: bool = False, min_gain: float = 0.0, confirm: bool = False,
    profiler: Profiler | None = None,
    progress: Callable[[str, int, int | None], None] | None = None,
    time_left: Callable[[], float | None] | None = None, costs: SearchCosts | None = None,
) -> AlsResult:  # fmt: skip
    """The fewest profiling runs, executed; the optimal assignment, guarded and (``confirm``)
    confirmed end to end. ``pim`` names a non-home device that runs only :data:`PIM_OPS`.
    ``profiler`` times the runs (default: this process, records in EOP's default database);
    ``time_left`` and ``costs``: a search's (:func:`measure_costs`)."""
    names = [d.name for d in devices]
    pim = device_name(pim) if pim is not None else None
    if pim is not None and pim not in names[1:]:
        raise ValueError(f"--pim {pim!r}: must be one of the non-home devices {names[1:]}")
    dcg = dcg_of(OpGraph.from_module(model.mod), names, {pim: PIM_OPS} if pim else None)
    runs = tuple(profiling_runs(dcg))
    if profiler is None:
        from tvm_hetero.profiling.profiler import profiler_for

        profiler = profiler_for(options=options)
    measured = measure_costs(model, devices, dcg, runs, profiler, progress=progress,
                             time_left=time_left, costs=costs)  # fmt: skip
    if FUSED_PRICES and _time_for_fused_runs(len(devices), time_left, costs):
        if progress:
            progress("each device's fused run", len(runs), len(runs))
        measured = scaled_costs(measured, fused_scales(model, devices, dcg, measured, profiler,
                                                       costs))  # fmt: skip
    start = time.perf_counter()
    plan = plan_als(dcg, measured, exact=exact, min_gain=min_gain)
    plan_s = time.perf_counter() - start
    seconds: dict[str, float] = {}
    if confirm:
        plan, seconds = confirm_by_measurement(model, devices, plan, dcg, measured, options)
    return AlsResult(plan, dcg, measured, runs, plan_s, seconds)
