"""EOP on tvm-hetero: measure what the planner needs, then plan EOP and its baselines.

Measurement (real ``time_evaluator`` timings through the :class:`Profiler`): every operator's time
on each device (one instrumented whole-model run per device), sweeps of each key operator along
each of its partition dimensions on both devices (fitted to patterns, stored next to the profile
database), copies between the devices and slice/concat on the home device. Planning is
:mod:`tvm_hetero.plan.eop`, pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tvm
from tvm import relax
from tvm.runtime import DataType
from tvm.target import Target

from tvm_hetero._compat import make_target
from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.build.vdevices import vdevices_of
from tvm_hetero.costmodel.patterns import Pattern, PatternStore, sample_sizes
from tvm_hetero.costmodel.transfer import TransferFit, fit_transfer
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.devices.spec import DeviceKind, DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.attrs import ENTRY_FUNC
from tvm_hetero.ir.bindings import op_bindings
from tvm_hetero.ir.split_dims import SplitDim, split_dims, traffic
from tvm_hetero.ir.workloads import Dim, local_copy_module
from tvm_hetero.pipelines import get_pipeline
from tvm_hetero.plan.eop import (
    DEFAULT_KEY_SHARE,
    DimOption,
    KeyOp,
    Link,
    SplitPlan,
    key_operators,
    plan_eop,
    plan_fixed_ratio,
)
from tvm_hetero.profiling.model_run import per_op_times
from tvm_hetero.profiling.profiler import Profiler, target_key
from tvm_hetero.records import RecordKind
from tvm_hetero.runtime.measure import random_args
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.strategies.base import (
    Pace,
    SearchCosts,
    alone_seconds,
    check_time,
)

MIN_EXTENT = 4
"""Dimensions shorter than this are not cut (too few ratios to be worth a split)."""
COPY_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22)
"""Bytes at which copies and slices are measured for the link fits."""


Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class EopInputs:
    """What the EOP planner and its baselines consume, measured on two devices.

    ``devices`` has the home device (the faster one over the whole model) first; ``op_s`` holds
    every operator's time on each of them; ``fits`` reports each fitted pattern; ``unswept``
    names the key operators the time left did not reach (whole on the home device).
    """

    devices: tuple[str, str]
    keys: tuple[KeyOp, ...]
    link: Link
    op_s: tuple[dict[str, float], dict[str, float]]
    fits: tuple[dict, ...] = field(default_factory=tuple)
    unswept: tuple[str, ...] = ()

    @property
    def rest_s(self) -> float:
        """The operators that are not key, on the home device."""
        keys = {k.node_id for k in self.keys}
        return sum(t for n, t in self.op_s[0].items() if n not in keys)


def measure_inputs(
    model: Model, devices: Sequence[DeviceSpec], profiler: Profiler,
    key_share: float = DEFAULT_KEY_SHARE, samples: int = 6, progress: Progress | None = None,
    time_left: Callable[[], float | None] | None = None, costs: SearchCosts | None = None,
) -> EopInputs:  # fmt: skip
    """Measure everything EOP needs for ``model`` on the two ``devices`` (any order).

    The key operators are swept longest first; with ``time_left`` (seconds, None for no limit)
    no sweep starts that would end past it by the sweeps' average so far, and the operators
    not swept stay whole on the home device (key operators no longer). In a search (its
    ``costs`` too), the operators' times in a run on each device are not begun where those
    runs (:meth:`SearchCosts.profiling_runs_s`, less those the database holds) could not end
    before the search stops EOP (:func:`check_time`), and each device's runs of the whole
    model are as many as fit in ``RUNS_WITHIN_S`` by the search's run of it (five at least:
    :func:`~tvm_hetero.strategies.base.alone_seconds`)."""
    if len(devices) != 2:
        raise ValueError(f"eop: give exactly two devices, got {[d.name for d in devices]}")
    if samples < 3:
        raise ValueError(f"eop: samples must be >= 3 (three patterns to tell apart), got {samples}")
    placed = [_placed(model, dev) for dev in devices]
    if costs is not None:
        stored = [profiler.has_op_times(p, [d]) for p, d in zip(placed, devices, strict=True)]
        missing = len(stored) - sum(stored)
        check_time(time_left, costs.profiling_runs_s(missing, 3),
                   "timing each operator in a run on each device")  # fmt: skip
    op_s, runs = [], []
    for p, dev in zip(placed, devices, strict=True):
        op_s.append(profiler.profile_op_times(p, [dev]).extra["node_seconds"])
        runs.append(alone_seconds(profiler, model, dev, costs))
    if runs[1] < runs[0]:
        devices, op_s, runs = [devices[1], devices[0]], [op_s[1], op_s[0]], [runs[1], runs[0]]
    home, other = devices
    bindings = op_bindings(model.mod[ENTRY_FUNC])
    cuttable = {b.node_id for b in bindings if _dims(b.call)}
    key_ids = set(key_operators({n: t for n, t in op_s[0].items() if n in cuttable}, key_share))
    store = PatternStore(Path(profiler.db.path).with_name("patterns.json"))
    swept: dict[str, list] = {}  # key operator -> (dimension, its patterns home and other)
    fits = []
    longest = sorted(
        (b for b in bindings if b.node_id in key_ids), key=lambda b: -op_s[0][b.node_id]
    )
    pace = Pace(time_left)
    for i, b in enumerate(longest):
        if not pace.room():
            break
        if progress:
            progress(b.node_id, i, len(longest))
        with pace.piece():
            for dim in _dims(b.call).values():
                patterns = []
                for dev in (home, other):
                    pattern, fit = _pattern(model, b.node_id, dim, dev, profiler, store, samples)
                    patterns.append(pattern)
                    fits.append(fit)
                swept.setdefault(b.node_id, []).append((dim, patterns))
    if progress:
        progress("done", len(longest), len(longest))
    key_bindings = [b for b in bindings if b.node_id in swept]
    store.save()
    whole = {  # each key operator whole, along its first dimension
        n: (p0.predict(dim.extent), p1.predict(dim.extent))
        for n, ((dim, (p0, p1)), *_) in swept.items()
    }
    levels = [_level(op_s[k], {n: t[k] for n, t in whole.items()}, runs[k]) for k in (0, 1)]
    cpus = [make_target(d.target) for d in devices if d.kind is DeviceKind.CPU and d.target]
    keys, prev = [], None
    for b in key_bindings:
        options = []
        for dim, patterns in swept[b.node_id]:
            t = traffic(b.call, dim)
            chains, chained_bytes = _chain(prev, b, dim)
            times = tuple(  # every dimension's pattern through the operator's whole time
                _Leveled(p.predict, levels[k] * _through(whole[b.node_id][k], p, dim.extent))
                for k, p in enumerate(patterns)
            )
            sizes = (t.cut_in_bytes, t.whole_in_bytes, t.out_bytes)
            options.append(DimOption(dim.name, dim.extent, times, *sizes, chains, chained_bytes,
                                     _step(dim, b.call, cpus)))  # fmt: skip
        keys.append(KeyOp(b.node_id, str(b.call.op.name), tuple(options)))
        prev = b
    leveled = tuple(
        {n: levels[k] * (whole[n][k] if n in whole else t) for n, t in op_s[k].items()}
        for k in (0, 1)
    )
    link = _link(home, other, profiler)
    unswept = tuple(b.node_id for b in longest if b.node_id not in swept)
    return EopInputs((home.name, other.name), tuple(keys), link, leveled, tuple(fits), unswept)


def _placed(model: Model, dev: DeviceSpec) -> tvm.IRModule:
    """The model placed whole on ``dev``: what its operators are timed in."""
    return get_pipeline("manual_placement", vdevices=vdevices_of([dev]), assignment={})(model.mod)


def _level(op_s: dict[str, float], key_s: dict[str, float], run_s: float) -> float:
    """What brings EOP's model of a device to the model's run there: the instrumented times of
    the operators that are not key plus the key operators' fitted patterns, whole, scaled to add
    up to ``run_s``. The instrumented run pays a timer and a wait for the GPU per operator
    (LSTM's 26 operators summed 0.34 ms on the H200 box's GPU, 0.064 on its CPU; the model ran
    in 0.028 and 0.023); one factor per device keeps the shares the patterns measured (a key
    operator's own instrumented time can be misattributed among its layout kernels)."""
    modelled = sum(t for n, t in op_s.items() if n not in key_s) + sum(key_s.values())
    return run_s / modelled if modelled > 0 else 1.0


def _through(whole_s: float, pattern, extent: int) -> float:
    """What scales ``pattern`` to ``whole_s`` at the whole ``extent``: a key operator left whole
    costs the same whichever dimension it could have been cut along (the home plan took the
    cheapest dimension's fit, 2 % under the model's run in one test of five)."""
    at_whole = pattern.predict(extent)
    return whole_s / at_whole if at_whole > 0 else 1.0


@dataclass(frozen=True)
class _Leveled:
    """A key operator's fitted pattern at its device's level (:func:`_level`)."""

    predict: Callable[[float], float]
    level: float

    def __call__(self, size: float) -> float:
        return self.predict(size) * self.level


VECTOR_DIMS = ("OC", "N")
"""Dimensions whose units a CPU kernel computes a vector at a time: a convolution's output
channels, a matmul's columns."""


def _step(dim: SplitDim, call: relax.Call, cpus: Sequence[Target]) -> int:
    """Units a share of ``dim`` comes in on the devices whose CPUs' targets are ``cpus``: the
    widest vector of the output's elements on them for :data:`VECTOR_DIMS`, else 1. A share
    of a part of a vector costs a whole one: on one core of an Intel Xeon (AVX-512), a 1 x 1
    convolution 64 -> 61 or 67 channels over 56 x 56 took 215 and 234 us against 148 for 64,
    and 512 -> 246 or 266 over 14 x 14 took 438 and 404 against 357 for 256, where EOP had cut
    such layers 67 / 61 and 266 / 246."""
    if dim.name not in VECTOR_DIMS:
        return 1
    bits = DataType(str(call.ty.dtype)).bits
    return max((vector_lanes(target, bits) for target in cpus), default=1)


def _dims(call: relax.Call) -> dict[str, SplitDim]:
    return {k: d for k, d in split_dims(call).items() if d.extent >= MIN_EXTENT}


def _pattern(
    model: Model, node: str, dim: SplitDim, device: DeviceSpec, profiler: Profiler,
    store: PatternStore, samples: int,
) -> tuple[Pattern, dict]:  # fmt: skip
    """The operator's time along ``dim`` on ``device``: swept, fitted (once per distinct
    workload and samples), stored."""
    axes = tuple((k, a) for k, a in enumerate(dim.in_axes) if a is not None)
    stride = dim.window.stride if dim.window else 1
    sizes = sample_sizes(dim.extent, samples)
    swept = profiler.sweep(
        model.mod, node, Dim(dim.name, axes), [s * stride for s in sizes], device
    )
    seconds = [r.median_s for _, r in swept]
    key = PatternStore.key(swept[-1][1].workload_key, target_key(device), profiler.mode, dim.name)
    pattern = store.fit(key, sizes, seconds)
    fit = {
        "node": node, "op": str(swept[-1][1].workload.get("op", "")),
        "workload": swept[-1][1].workload_key, "dim": dim.name, "device": device.name,
        **pattern.to_dict(),
    }  # fmt: skip
    return pattern, fit


def _chain(prev, binding, dim: SplitDim) -> tuple[str | None, int | None]:
    """The previous key operator's dimension whose output shards ``binding`` can take along
    ``dim`` as they are, and the bytes of that argument."""
    if prev is None or dim.window is not None:
        return None, None
    for k, arg in enumerate(binding.call.args):
        if arg.same_as(prev.var) and dim.in_axes[k] is not None:
            for name, pdim in _dims(prev.call).items():
                if pdim.window is None and pdim.out_axis == dim.in_axes[k]:
                    return name, traffic(prev.call, pdim).out_bytes
    return None, None


def _link(home: DeviceSpec, other: DeviceSpec, profiler: Profiler) -> Link:
    """Copy costs between the two devices, slicing on the home device, and whether the two
    shards of a cut run at the same time (a GPU beside the CPU, or two CPU workers on disjoint
    cores: then a cut costs ``max(t0, t1)``, else ``t0 + t1``)."""
    there, back = crossing(home, other, profiler), crossing(other, home, profiler)
    local = []
    for nbytes in COPY_SIZES:
        mod = local_copy_module(nbytes)
        local.append(
            profiler.measure(
                mod, home, RecordKind.OP, {"op": "slice+concat", "bytes": nbytes}
            ).median_s
        )
    concurrent = home.runs_beside(other)
    return Link(there.seconds, back.seconds, fit_transfer(COPY_SIZES, local).seconds, concurrent)


def crossing(
    src: DeviceSpec, dst: DeviceSpec, profiler: Profiler, cluster: ClusterSpec | None = None
) -> TransferFit:
    """What passing a tensor from a worker on ``src`` to one on ``dst`` costs the runtime.

    CPU workers of one process share memory: the measured handoff, no copy. A GPU beside the
    CPU: the handoff (the executor's steps, the copy of a tiny value, the wait for the GPU:
    39-41 us a crossing on the H200 box, where a bare copy takes 4-10) plus the bytes at the
    bandwidth fitted to measured copies. Between machines: the ``cluster``'s path between them
    (:func:`route_fit`), else the line fitted to measured copies (timed in this process: a
    copy in memory, which said nothing of a 1 Gbit/s link)."""
    if src.kind is dst.kind is DeviceKind.CPU and src.colocated(dst):
        return TransferFit(profiler.profile_handoff(src, dst).median_s, float("inf"), 0.0)
    routed = None if src.colocated(dst) or cluster is None else route_fit(src, dst, cluster)
    if routed is not None:
        return routed
    fit = fit_transfer(
        COPY_SIZES, [r.median_s for r in profiler.profile_transfer(src, dst, COPY_SIZES)]
    )
    if src.colocated(dst) and not (src.simulated or dst.simulated):
        handoff = profiler.profile_handoff(src, dst).median_s
        return TransferFit(max(handoff, fit.latency_s), fit.bandwidth_bps, fit.rel_error)
    return fit


def route_fit(src: DeviceSpec, dst: DeviceSpec, cluster: ClusterSpec) -> TransferFit | None:
    """The ``cluster``'s path from ``src`` to ``dst`` as a link, as EdgePipe prices it: the
    slowest link's bandwidth, the latencies summed; None where no path joins them."""
    found = cluster.path_rate(src.name, dst.name)
    if found is None:
        return None
    bandwidth, latency = found
    return TransferFit(latency, bandwidth, 0.0)


def crossings(
    devices: Sequence[DeviceSpec], profiler: Profiler, local_only: bool = False,
    cluster: ClusterSpec | None = None,
) -> dict[tuple[int, int], TransferFit]:  # fmt: skip
    """:func:`crossing` for each ordered pair of ``devices`` (by index); with ``local_only``,
    only the pairs of workers of one process."""
    return {
        (a, b): crossing(src, dst, profiler, cluster)
        for a, src in enumerate(devices)
        for b, dst in enumerate(devices)
        if a != b and (src.colocated(dst) or not local_only)
    }


STRATEGIES = ("eop", "equal", "fixed", "home", "other")
"""EOP and the paper's baselines: Equal (0.5), Fixed (model speedup), each single device."""


def plan(inputs: EopInputs, strategy: str = "eop", span: float = 0.01) -> SplitPlan:
    """``strategy``'s plan from measured inputs (``home`` / ``other``: one device only)."""
    keys, link, devices = inputs.keys, inputs.link, inputs.devices
    if strategy == "eop":
        return plan_eop(keys, link, devices, inputs.rest_s, span)
    if strategy == "equal":
        return plan_fixed_ratio(keys, link, devices, 0.5, inputs.rest_s, "equal")
    if strategy == "fixed":
        speedup = sum(inputs.op_s[0].values()) / sum(inputs.op_s[1].values())
        return plan_fixed_ratio(keys, link, devices, speedup / (1 + speedup), inputs.rest_s)
    if strategy == "home":
        return plan_fixed_ratio(keys, link, devices, 0.0, inputs.rest_s, "home")
    if strategy == "other":
        total = sum(inputs.op_s[1].values())
        return SplitPlan("other", devices[::-1], (), total, {"single": devices[1]})
    raise ValueError(f"eop: unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}")


def measured_key_ops(
    model: Model,
    devices: Sequence[DeviceSpec],
    plan_: SplitPlan,
    options: BuildOptions | None = None,
    runs: int = 5,
) -> dict[str, float]:
    """Each key operator's measured time inside the planned model (unfused, instrumented run):
    its shards, the slices and copies ``RealizeOperatorSplits`` emitted for it, and its concat."""
    from tvm_hetero.build.compiled import in_plan_order, place

    args = random_args([(i.shape, i.dtype) for i in model.inputs])
    placed = place(model, in_plan_order(devices, plan_), plan_)
    times = per_op_times(placed, args, options, runs).node_seconds
    out = {}
    for s in plan_.splits:
        name = s.node_id
        shards = range(len(s.shares))
        parts = {name} | {f"{name}_{i}" for i in shards} | {f"{name}_{i}_home" for i in shards}
        out[name] = sum(t for n, t in times.items() if n in parts or n.startswith(f"{name}_in"))
    return out
