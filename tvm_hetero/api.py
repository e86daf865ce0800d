"""The Python interface the CLI and the notebooks call: plan, profile, compile, run, check.

``compile`` places a model by a plan and builds a :class:`Deployment` (units on devices);
``run`` and ``median_seconds`` run it on the concurrent runtime (:mod:`tvm_hetero.runtime`).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tvm_hetero.build.compiled import CompiledModel as CompiledModel
from tvm_hetero.build.compiled import compile_model, require_static_inputs
from tvm_hetero.build.compiled import in_plan_order as in_plan_order
from tvm_hetero.build.compiled import place as place
from tvm_hetero.build.multi_device import BuildOptions, lower
from tvm_hetero.devices.discover import device_name
from tvm_hetero.devices.spec import DeviceSpec, SpecError
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.optimize.search import OptimizeResult
from tvm_hetero.plan.placement import Placement, place_by_op_type
from tvm_hetero.plan.registry import Plan
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.records import ProfileRecord
from tvm_hetero.runtime.deployment import Deployment
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.measure import MeasureConfig, choose_number
from tvm_hetero.schedules import KernelChoice, kernel_choices
from tvm_hetero.strategies.base import PlanResult, ProgressLike, as_progress
from tvm_hetero.strategies.base import placement_summary as placement_summary
from tvm_hetero.strategies.registry import get_strategy


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


compile = compile_model
"""Place and compile ``model`` for ``devices`` (everything on ``devices[0]`` by default): one
unit per run of operators on one device, one library per device
(:func:`~tvm_hetero.build.compiled.compile_model`)."""


def plan(
    model: Model, devices: Sequence[DeviceSpec], strategy: str = "eop",
    progress: ProgressLike = None, **settings: Any,
) -> Plan:  # fmt: skip
    """Measure ``model`` on ``devices`` and plan it with ``strategy`` (``"eop"``, ``"als"``,
    ``"duet"``, ``"edgepipe"``, ``"flexpie"``: :mod:`tvm_hetero.strategies.registry`).
    ``settings`` are the strategy's flags by their Python names, defaulting as on the command
    line (``db``, ``confirm``, ``cluster``: a ``ClusterSpec``, ``options``: ``BuildOptions``;
    EOP: ``key_share``, ``samples``, ``span``; ALS: ``exact``, ``min_gain``, ``pim``; DUET:
    ``correction_runs``; FlexPie: ``estimators``, ``max_run``, ``confirm_plans``); a name the
    strategy does not take is refused. Compile the result with :func:`compile`
    (``in_plan_order(devices, plan)`` gives the devices in the plan's order)."""
    return plan_result(model, devices, strategy, progress, **settings).plan


def plan_result(
    model: Model, devices: Sequence[DeviceSpec], strategy: str = "eop",
    progress: ProgressLike = None, **settings: Any,
) -> PlanResult:  # fmt: skip
    """As :func:`plan`, with what the strategy weighed and measured, for its report
    (``get_strategy(strategy).report(result, model, devices)``) and chart."""
    if not devices:
        raise SpecError("plan: give at least one device")
    require_static_inputs(model)
    chosen = get_strategy(strategy)
    return chosen.plan(model, list(devices), chosen.settings(**settings), as_progress(progress))


def optimize(
    model: Model, devices: Sequence[DeviceSpec], objective: str = "latency",
    budget_s: float = 600.0, progress: ProgressLike = None,
    onnx: str | Path | None = None, top: int = 3, runs: int = 50, **settings: Any,
) -> OptimizeResult:  # fmt: skip
    """The fastest way to run ``model`` on ``devices``: every strategy that applies plans
    (measurements shared through ``db``), each device alone is a candidate too, the ``top``
    plans by predicted time and every single device are compiled and timed end to end in
    interleaved rounds (``runs`` runs each), and the fastest measured is kept
    (:func:`tvm_hetero.optimize.search.optimize`). ``onnx``: the model's ONNX file, for ONNX
    Runtime on each CPU alone timed in the same rounds. ``settings``: any strategy's, as for
    :func:`plan`. ``result.compiled.save(path)`` writes the kept build."""
    from tvm_hetero.optimize.search import optimize as search
    from tvm_hetero.optimize.search import settings_names

    require_static_inputs(model)
    unknown = sorted(set(settings) - settings_names())
    if unknown:
        raise ValueError(f"optimize: no strategy takes {', '.join(unknown)}")
    return search(
        model, list(devices), objective, budget_s, settings, as_progress(progress),
        None if onnx is None else str(onnx), top, runs,
    )  # fmt: skip


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


def max_abs_error(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """Largest absolute difference between two lists of outputs of equal shapes."""
    if len(a) != len(b):
        raise ValueError(f"output counts differ: {len(a)} vs {len(b)}")
    return max((float(np.max(np.abs(x - y))) if x.size else 0.0) for x, y in zip(a, b, strict=True))
