"""The Python interface the CLI and the notebooks call: plan, profile, compile, run, check.

``compile`` places a model by a plan and builds a :class:`Deployment` (units on devices);
``run`` and ``median_seconds`` run it on the concurrent runtime (:mod:`tvm_hetero.runtime`).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from tvm_hetero.build.deploy import build_deployment
from tvm_hetero.build.multi_device import BuildOptions, lower
from tvm_hetero.build.vdevices import vdevices_of
from tvm_hetero.devices.discover import device_name, merged_cpu
from tvm_hetero.devices.spec import DeviceSpec, SpecError
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.pipelines import get_pipeline
from tvm_hetero.plan.placement import Placement, place_by_op_type
from tvm_hetero.plan.registry import Plan
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.profiling.record import ProfileRecord
from tvm_hetero.runtime.deployment import Deployment
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.measure import MeasureConfig, choose_number
from tvm_hetero.schedules import KernelChoice, kernel_choices
from tvm_hetero.strategies.registry import get_strategy


@dataclass(frozen=True)
class CompiledModel:
    """A model compiled for a list of devices, ready to run or save."""

    deployment: Deployment = field(repr=False)
    placed: tvm.IRModule = field(repr=False)
    devices: tuple[DeviceSpec, ...]
    placement: Plan
    model: Model = field(repr=False)

    def save(self, path: str | Path) -> Path:
        """Write the compiled model to a ``.tar`` that ``tvm-hetero run`` reads."""
        return self.deployment.save(path)


def placement_from_rules(
    model: Model, devices: Sequence[DeviceSpec], rules: Mapping[str, str]
) -> Placement:
    """Placement from ``{op_type: device name}`` rules; other operators go to ``devices[0]``."""
    names = [d.name for d in devices]
    index = {}
    for op_type, dev in rules.items():
        if device_name(dev) not in names:
            raise SpecError(f"--place {op_type}={dev}: {dev!r} is not one of the devices {names}")
        index[op_type] = names.index(device_name(dev))
    graph = OpGraph.from_module(model.mod)
    return place_by_op_type([(n.node_id, n.op) for n in graph.nodes], index, names)


def in_plan_order(devices: Sequence[DeviceSpec], plan: Plan) -> list[DeviceSpec]:
    """``devices`` reordered as ``plan`` lists them (its home device first)."""
    by_name = {d.name: d for d in devices}
    merged = merged_cpu(devices)  # a fallback to one worker on all the given cores
    if merged is not None:
        by_name.setdefault(merged.name, merged)
    missing = [n for n in plan.devices if n not in by_name]
    if missing:
        raise SpecError(
            f"the plan uses devices {missing}; give them ({[d.name for d in devices]} given)"
        )
    return [by_name[n] for n in plan.devices]


def place(model: Model, devices: Sequence[DeviceSpec], placement: Plan) -> tvm.IRModule:
    """Declare ``devices`` as vdevices and realize the plan: operators placed on devices
    (:class:`Placement`) or key operators cut between two devices (:class:`SplitPlan`)."""
    require_static_inputs(model)
    if [d.name for d in devices] != list(placement.devices):
        raise SpecError(
            f"plan is for devices {list(placement.devices)}, not {[d.name for d in devices]}"
        )
    name, arguments = placement.realisation()
    seq = get_pipeline(name, vdevices=vdevices_of(devices), **arguments)
    return seq(model.mod)


def require_static_inputs(model: Model) -> None:
    """Refuse a model with symbolic input dimensions before any work, naming the inputs and how
    to give their shapes (kernels are compiled for one shape)."""
    symbolic = [i for i in model.inputs if any(not isinstance(d, int) for d in i.shape)]
    if symbolic:
        example = " ".join(
            f"--input-shape {i.name}:"
            + "x".join(str(d if isinstance(d, int) else 1) for d in i.shape)
            for i in symbolic
        )
        shapes = ", ".join(f"{i.name} {tuple(i.shape)}" for i in symbolic)
        raise SpecError(
            f"{model.name}: input(s) with symbolic dimensions: {shapes}; give their shapes "
            f"({example}, or load_model(..., shapes=...))"
        )


def compile(
    model: Model,
    devices: Sequence[DeviceSpec],
    placement: Plan | None = None,
    options: BuildOptions | None = None,
) -> CompiledModel:
    """Place and compile ``model`` for ``devices`` (everything on ``devices[0]`` by default):
    one unit per run of operators on one device, one library per device."""
    if not devices:
        raise SpecError("compile: give at least one device")
    placement = placement or Placement(tuple(d.name for d in devices))
    placed = place(model, devices, placement)
    deployment = build_deployment(
        model, devices, placed, options, placement.to_dict(), placement.units()
    )
    return CompiledModel(deployment, placed, tuple(devices), placement, model)


def plan(
    model: Model, devices: Sequence[DeviceSpec], strategy: str = "eop", **settings: Any
) -> Plan:
    """Measure ``model`` on ``devices`` and plan it with ``strategy`` (``"eop"``, ``"als"``: see
    :mod:`tvm_hetero.strategies.registry`); ``settings`` go to that strategy's ``make_plan``
    (EOP: ``db``, ``options``, ``key_share``, ``samples``, ``span``, ``progress``; ALS:
    ``options``, ``pim``, ``exact``, ``min_gain``, ``confirm``; DUET: ``db``, ``options``,
    ``budget``; EdgePipe: ``cluster``, ``db``, ``options``, ``orders``; FlexPie: ``cluster``,
    ``estimators``, ``db``, ``options``, ``confirm``: plans timed end to end, 0 for none).
    Compile the result with :func:`compile` (``in_plan_order(devices, plan)`` gives the devices
    in the plan's order)."""
    if not devices:
        raise SpecError("plan: give at least one device")
    require_static_inputs(model)
    return get_strategy(strategy).planner_module().make_plan(model, list(devices), **settings)


def profile(
    model: Model, devices: Sequence[DeviceSpec], db: str | Path,
    config: MeasureConfig | None = None, options: BuildOptions | None = None,
    progress: Callable[[str, str, int, int], None] | None = None,
) -> dict[str, dict[str, ProfileRecord]]:  # fmt: skip
    """Every operator of ``model`` compiled standalone and timed on each device; records are kept
    in (and reused from) the profile database ``db``. Returns ``{device: {operator: record}}``;
    ``progress(device, operator, done, total)`` is called as operators finish."""
    require_static_inputs(model)
    profiler = Profiler(
        ProfileDB(db), config=config or MeasureConfig(), options=options or BuildOptions()
    )
    out = {}
    for d in devices:
        report = (
            (lambda what, done, total, name=d.name: progress(name, what, done, total))
            if progress
            else None
        )
        out[d.name] = profiler.profile_ops(model.mod, d, report)
    return out


def kernel_schedules(
    compiled: CompiledModel, options: BuildOptions | None = None
) -> list[KernelChoice]:
    """Which schedule each kernel of ``compiled`` got under ``options`` (tuned, rule, default)."""
    return kernel_choices(lower(compiled.placed, options))


def _deployment(compiled: CompiledModel | Deployment) -> Deployment:
    return compiled.deployment if isinstance(compiled, CompiledModel) else compiled


def run(compiled: CompiledModel | Deployment, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a compiled model once on the concurrent runtime (one worker per device)."""
    deployment = _deployment(compiled)
    with Executor(deployment) as executor:
        return executor.run(ordered_args(deployment.inputs, inputs))


def median_seconds(
    compiled: CompiledModel | Deployment,
    inputs: Mapping[str, np.ndarray],
    config: MeasureConfig | None = None,
) -> float:
    """Median end-to-end time of a compiled model: ``config.repeat`` samples, each the mean of
    enough runs to last ``config.min_repeat_ms``."""
    config = config or MeasureConfig()
    deployment = _deployment(compiled)
    with Executor(deployment) as executor:
        tensors = executor.place_inputs(ordered_args(deployment.inputs, inputs))
        first = executor.time(tensors, repeat=1, warmup=1).median_ms / 1e3
        number = choose_number(first, config)
        samples = [
            executor.time(tensors, repeat=number, warmup=0).mean_ms / 1e3
            for _ in range(config.repeat)
        ]
    return float(np.median(samples))


def load(path: str | Path) -> Deployment:
    """A saved compiled model, its libraries loaded (fails clearly where a device is missing)."""
    from tvm_hetero.runtime.deployment import load as load_deployment

    workdir = tempfile.mkdtemp(prefix="tvm_hetero_")  # its libraries: kept while it runs
    try:
        deployment = load_deployment(path, workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    # a remote device's library is uploaded from its file when an executor starts, so the
    # folder lives as long as the process (a test suite's run left one per load)
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    return deployment


def reference_outputs(
    model: Model, inputs: Mapping[str, np.ndarray], device: DeviceSpec
) -> list[np.ndarray]:
    """Outputs of the unpartitioned model on one device, with TVM's own (unscheduled) kernels."""
    return run(compile(model, [device], options=BuildOptions("default")), inputs)


def ordered_args(specs: Sequence[Any], inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Input arrays in parameter order, checked against the specs."""
    missing = [s.name for s in specs if s.name not in inputs]
    if missing:
        raise ValueError(f"missing input(s) {missing}; the model takes {[s.name for s in specs]}")
    args = []
    for s in specs:
        a = np.asarray(inputs[s.name])
        static = all(isinstance(d, int) for d in s.shape)
        if (static and tuple(a.shape) != tuple(s.shape)) or str(a.dtype) != s.dtype:
            raise ValueError(
                f"input {s.name!r}: got {a.dtype}{list(a.shape)}, expected {s.dtype}{list(s.shape)}"
            )
        args.append(a)
    return args


def model_id(model: Model) -> str:
    """The identity a plan records: the model's name and a digest of its operators (ids and
    types), so a plan made for another model, or another size of it, is refused."""
    import hashlib

    ops = ";".join(f"{n.node_id}:{n.op}" for n in OpGraph.from_module(model.mod).nodes)
    return f"{model.name}#{hashlib.sha1(ops.encode()).hexdigest()[:10]}"


def placement_summary(model: Model, placement: Plan) -> list[dict[str, Any]]:
    """Per device: operators, FLOPs share and bytes copied in, for a placement of ``model``."""
    from tvm_hetero.plan.placement import summarize

    graph = OpGraph.from_module(model.mod)
    ops = [(n.node_id, n.flops) for n in graph.nodes]
    edges = [(u, v, d["bytes"]) for u, v, d in graph.graph.edges(data=True)]
    return summarize(ops, edges, placement)


def max_abs_error(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """Largest absolute difference between two lists of outputs of equal shapes."""
    if len(a) != len(b):
        raise ValueError(f"output counts differ: {len(a)} vs {len(b)}")
    return max((float(np.max(np.abs(x - y))) if x.size else 0.0) for x, y in zip(a, b, strict=True))
