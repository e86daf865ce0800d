"""A model compiled for a plan: placed by the plan's pass pipeline and built into a
:class:`~tvm_hetero.runtime.deployment.Deployment` (units on devices). ``api.compile`` and every
strategy that times its plans end to end compile through here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tvm

from tvm_hetero.build.deploy import build_deployment
from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.build.vdevices import vdevices_of
from tvm_hetero.devices.discover import merged_cpu
from tvm_hetero.devices.spec import DeviceSpec, SpecError
from tvm_hetero.frontends.model import Model
from tvm_hetero.pipelines import get_pipeline
from tvm_hetero.plan.placement import Placement
from tvm_hetero.plan.registry import Plan
from tvm_hetero.runtime.deployment import Deployment
from tvm_hetero.runtime.memory import give_back_freed_memory


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


def compile_model(
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
    # the compiler's arrays, freed, stay in the C heap: a ViT-Large build held 2.1 times its
    # weights, 1.05 once given back
    give_back_freed_memory()
    return CompiledModel(deployment, placed, tuple(devices), placement, model)
