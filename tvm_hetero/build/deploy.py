"""Compile a placed module into a :class:`~tvm_hetero.runtime.deployment.Deployment`.

One device: the whole ``main`` is one unit, built exactly as a single-device build. Several:
``OutlineDeviceUnits`` cuts ``main`` into units and copies; the units of each device are built
into one library for that device alone (its weights are bound there, so they are on the device
once it is loaded and never copied per run), and the rest of ``main`` becomes the deployment's
steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tvm
from tvm import relax

from tvm_hetero._compat import PrimFunc, vdevice_equal
from tvm_hetero.build.multi_device import BuildOptions, build
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.attrs import COPY_OP, ENTRY_FUNC, UNIT_DEVICE_ATTR
from tvm_hetero.ir.bindings import calls_op, iter_bindings
from tvm_hetero.ir.types import tensor_infos
from tvm_hetero.pipelines import get_pipeline
from tvm_hetero.runtime.deployment import Deployment, Step


def build_deployment(
    model: Model,
    devices: Sequence[DeviceSpec],
    placed: tvm.IRModule,
    options: BuildOptions | None = None,
    plan: dict[str, Any] | None = None,
    units: tuple[str, dict[str, Any]] = ("device_units", {}),
) -> Deployment:
    """Build the units of ``placed`` (a module placed on ``devices``) and describe how they run;
    ``units`` names the pipeline (and its arguments) that cuts ``placed`` into units."""
    inputs = tuple(model.inputs)
    params = [str(p.name) for p in placed[ENTRY_FUNC].params]
    common = {"model": model.name, "devices": tuple(devices), "inputs": inputs}
    common |= {"plan": plan or {}, "source": model.source}
    if len(devices) == 1:
        step = Step("unit", "main", tuple(params), device=0, function=ENTRY_FUNC)
        return Deployment(
            outputs=("main",), steps=(step,), libraries={0: build(placed, options)}, **common
        )
    outlined = get_pipeline(units[0], **units[1])(placed)
    steps, outputs = deployment_steps(outlined)
    vdevices = list(outlined.global_infos["vdevice"])
    libraries = {
        k: build(device_module(outlined, k, vdevices[k]), options)
        for k in sorted({s.device for s in steps if s.kind == "unit"})
    }
    return Deployment(outputs=outputs, steps=steps, libraries=libraries, **common)


def deployment_steps(outlined: tvm.IRModule) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    """The steps and output values of an ``OutlineDeviceUnits`` result's ``main``."""
    main = outlined[ENTRY_FUNC]
    vdevices = list(outlined.global_infos["vdevice"])
    ids: dict[relax.Var, str] = {}
    taken: set[str] = set()

    def name(var: relax.Var) -> str:
        base, k = str(var.name), 1
        text = base
        while text in taken:
            text, k = f"{base}.{k}", k + 1
        taken.add(text)
        ids[var] = text
        return text

    for p in main.params:
        name(p)
    steps = []
    for _, _, b in iter_bindings(main):
        value = b.value
        if isinstance(value, relax.Var):  # an alias
            ids[b.var] = ids[value]
        elif isinstance(value, relax.TupleGetItem):
            src = ids[value.tuple_value]
            steps.append(Step("item", name(b.var), (src,), index=int(value.index)))
        elif isinstance(value.op, tvm.ir.GlobalVar):
            unit = outlined[value.op]
            device = int(unit.attrs[UNIT_DEVICE_ATTR])
            args = tuple(ids[a] for a in value.args)
            steps.append(Step("unit", name(b.var), args, device, value.op.name_hint))
        elif calls_op(value, COPY_OP):
            dst = next(i for i, v in enumerate(vdevices) if vdevice_equal(v, b.var.ty.vdevice))
            nbytes = sum(t.nbytes or 0 for t in tensor_infos(b.var.ty))
            steps.append(Step("copy", name(b.var), (ids[value.args[0]],), dst, nbytes=nbytes))
        else:
            raise ValueError(f"deployment: unexpected binding {b.var.name!r} in main")
    result = main.body.body
    fields = result.fields if isinstance(result, relax.Tuple) else [result]
    return tuple(steps), tuple(ids[f] for f in fields)


def device_module(outlined: tvm.IRModule, index: int, vdevice: Any) -> tvm.IRModule:
    """The units of device ``index`` alone, declaring only that device.

    A ``to_vdevice`` inside a unit (a weight brought to the unit's device) becomes the weight
    itself: with one device there is nothing to copy, and the weight is bound to this library.
    """
    funcs = {}
    for gv, func in outlined.functions_items():
        if isinstance(func, PrimFunc):
            funcs[gv] = func
        elif func.attrs and int(func.attrs.get(UNIT_DEVICE_ATTR, -1)) == index:
            funcs[gv] = _DropCopies().visit_expr(func)
    mod = tvm.IRModule(funcs)
    mod.update_global_info("vdevice", [vdevice])
    return mod


@relax.expr_functor.mutator
class _DropCopies(relax.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if calls_op(call, COPY_OP):
            return call.args[0]
        return call
