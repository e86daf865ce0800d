"""The Python functions behind the CLI and the tutorials: place, compile, run, check."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from tvm_hetero.build import artifact, runner
from tvm_hetero.build.multi_device import BuildOptions, build, lower
from tvm_hetero.build.vdevices import runtime_devices, vdevices_of
from tvm_hetero.devices.spec import DeviceKind, DeviceSpec, SpecError
from tvm_hetero.frontends.model import InputSpec, Model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.pipelines import get_pipeline
from tvm_hetero.plan.eop import SplitPlan
from tvm_hetero.plan.placement import Placement, place_by_op_type
from tvm_hetero.profiling.measure_core import MeasureConfig
from tvm_hetero.schedules import KernelChoice, kernel_choices


@dataclass(frozen=True)
class CompiledModel:
    """A model compiled for a list of devices, ready to run or save."""

    executable: tvm.runtime.Executable = field(repr=False)
    placed: tvm.IRModule = field(repr=False)
    devices: tuple[DeviceSpec, ...]
    placement: Placement | SplitPlan
    model: Model = field(repr=False)

    def meta(self) -> dict[str, Any]:
        """The JSON description saved next to the library."""
        return {
            "model": self.model.name,
            "source": self.model.source,
            "inputs": [
                {"name": i.name, "shape": list(i.shape), "dtype": i.dtype, "high": i.high}
                for i in self.model.inputs
            ],
            "vdevices": [
                {"name": d.name, "kind": d.kind.value, "index": d.index, "threads": d.threads}
                for d in self.devices
            ],
            "plan": self.placement.to_dict(),
            "tvm": tvm.__version__,
        }

    def save(self, path: str | Path) -> Path:
        """Write the compiled model to a ``.tar`` that ``tvm-hetero run`` reads."""
        return artifact.save(self.executable, self.meta(), path)


def placement_from_rules(
    model: Model, devices: Sequence[DeviceSpec], rules: Mapping[str, str]
) -> Placement:
    """Placement from ``{op_type: device name}`` rules; other operators go to ``devices[0]``."""
    names = [d.name for d in devices]
    index = {}
    for op_type, dev in rules.items():
        if dev not in names:
            raise SpecError(f"--place {op_type}={dev}: {dev!r} is not one of the devices {names}")
        index[op_type] = names.index(dev)
    graph = OpGraph.from_module(model.mod)
    return place_by_op_type([(n.node_id, n.op) for n in graph.nodes], index, names)


def in_plan_order(devices: Sequence[DeviceSpec], plan: Placement | SplitPlan) -> list[DeviceSpec]:
    """``devices`` reordered as ``plan`` lists them (its home device first)."""
    by_name = {d.name: d for d in devices}
    missing = [n for n in plan.devices if n not in by_name]
    if missing:
        raise SpecError(
            f"the plan uses devices {missing}; give them ({[d.name for d in devices]} given)"
        )
    return [by_name[n] for n in plan.devices]


def place(
    model: Model, devices: Sequence[DeviceSpec], placement: Placement | SplitPlan
) -> tvm.IRModule:
    """Declare ``devices`` as vdevices and realize the plan: operators placed on devices
    (:class:`Placement`) or key operators cut between two devices (:class:`SplitPlan`)."""
    if [d.name for d in devices] != list(placement.devices):
        raise SpecError(
            f"plan is for devices {list(placement.devices)}, not {[d.name for d in devices]}"
        )
    if isinstance(placement, SplitPlan):
        seq = get_pipeline(
            "operator_splits", vdevices=vdevices_of(devices), splits=placement.annotations()
        )
    else:
        seq = get_pipeline(
            "manual_placement",
            vdevices=vdevices_of(devices),
            assignment=dict(placement.assignment),
        )
    return seq(model.mod)


def compile_model(
    model: Model,
    devices: Sequence[DeviceSpec],
    placement: Placement | SplitPlan | None = None,
    options: BuildOptions | None = None,
) -> CompiledModel:
    """Place and compile ``model`` for ``devices`` (everything on ``devices[0]`` by default)."""
    if not devices:
        raise SpecError("compile: give at least one device")
    placement = placement or Placement(tuple(d.name for d in devices))
    placed = place(model, devices, placement)
    return CompiledModel(build(placed, options), placed, tuple(devices), placement, model)


def kernel_schedules(
    compiled: CompiledModel, options: BuildOptions | None = None
) -> list[KernelChoice]:
    """Which schedule each kernel of ``compiled`` got under ``options`` (tuned, rule, default)."""
    return kernel_choices(lower(compiled.placed, options))


def vm_of(compiled: CompiledModel) -> tuple[tvm.runtime.vm.VirtualMachine, tvm.runtime.Device]:
    """A VM over the compiled model's devices, and its home device."""
    configure_threads(compiled.devices)
    devs = runtime_devices(list(compiled.placed.global_infos["vdevice"]))
    return runner.make_vm(compiled.executable, devs), devs[0]


def run_model(compiled: CompiledModel, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a compiled model once."""
    vm, home = vm_of(compiled)
    return runner.run(vm, ordered_args(compiled.model.inputs, inputs), home)


def median_seconds(
    compiled: CompiledModel, inputs: Mapping[str, np.ndarray], config: MeasureConfig | None = None
) -> float:
    """Median end-to-end time of a compiled model (``time_evaluator``, adaptive repeats)."""
    from tvm_hetero.profiling.profiler import device_ref
    from tvm_hetero.profiling.timer import LocalRunner

    configure_threads(compiled.devices)
    timing = LocalRunner().time(
        compiled.executable, [device_ref(d) for d in compiled.devices],
        ordered_args(compiled.model.inputs, inputs), config or MeasureConfig(),
    )  # fmt: skip
    return float(np.median(timing.samples_s))


def reference_outputs(
    model: Model, inputs: Mapping[str, np.ndarray], device: DeviceSpec
) -> list[np.ndarray]:
    """Outputs of the unpartitioned model on one device, with TVM's own (unscheduled) kernels."""
    return run_model(compile_model(model, [device], options=BuildOptions("default")), inputs)


def configure_threads(devices: Sequence[DeviceSpec]) -> None:
    """Give TVM's CPU pool the thread count the CPU devices ask for."""
    threads = [d.threads for d in devices if d.kind is DeviceKind.CPU and d.threads]
    if threads:
        runner.set_cpu_threads(max(threads))


def ordered_args(specs: Sequence[InputSpec], inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
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


def load_compiled(path: str | Path) -> tuple[runner.relax.VirtualMachine, tvm.runtime.Device, dict]:
    """Load a saved compiled model into a VM; fails clearly when a device is missing here."""
    meta = artifact.read_meta(path)
    kinds = [("cuda" if v["kind"] == "cuda" else "llvm", v["index"]) for v in meta["vdevices"]]
    from tvm_hetero.build.vdevices import runtime_device

    devs = [runtime_device(k, i) for k, i in kinds]  # raises for a missing GPU before loading
    threads = [
        v.get("threads") for v in meta["vdevices"] if v["kind"] == "cpu" and v.get("threads")
    ]
    if threads:
        runner.set_cpu_threads(max(threads))
    workdir = tempfile.mkdtemp(prefix="tvm_hetero_")
    art = artifact.load(path, workdir)
    return runner.make_vm(art.lib, devs), devs[0], meta


def placement_summary(model: Model, placement: Placement) -> list[dict[str, Any]]:
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
