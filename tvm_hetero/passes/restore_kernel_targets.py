"""RestoreKernelTargets: give every PrimFunc the target of the vdevice that calls it."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule

from tvm_hetero._compat import PrimFunc, TensorType, TupleType
from tvm_hetero.ir.attrs import CALL_TIR_OP


@tvm.transform.module_pass(opt_level=0, name="RestoreKernelTargets")
class RestoreKernelTargets:
    """Re-attach ``"target"`` to kernels that lost it in fusion.

    ``FuseTIR`` drops the ``"target"`` attribute of fused kernels in multi-vdevice modules; without
    it dlight cannot schedule them and ``tvm.compile`` treats every kernel as host code. The target
    is read from the vdevice of the ``call_tir`` output.

    Notes
    -----
    Precondition: vdevices are declared and ``RealizeVDevice`` ran. A kernel whose output has no
    vdevice (one computed from constants only) runs on the home device, vdevice 0. A kernel
    called from two targets is an error (``InferKernelVDevices`` gives each target a copy).
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a copy of ``mod`` whose PrimFuncs all carry a target."""
        vdevices = list(mod.global_infos.get("vdevice", []))
        if not vdevices:
            raise ValueError("RestoreKernelTargets: the module declares no vdevices")
        home = vdevices[0].target
        wanted: dict[str, tvm.target.Target] = {}
        for _, func in mod.functions_items():
            if isinstance(func, relax.Function):
                relax.analysis.post_order_visit(func, lambda e: _collect(e, wanted, home))
        out = mod.clone()
        for gv, func in mod.functions_items():
            name = gv.name_hint
            if not isinstance(func, PrimFunc) or name not in wanted:
                continue
            current = func.attrs.get("target") if func.attrs else None
            if current is None:
                out[gv] = func.with_attr("target", wanted[name])
        return out


def _collect(
    expr: relax.Expr, wanted: dict[str, tvm.target.Target], home: tvm.target.Target
) -> None:
    if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)):
        return
    if expr.op.name != CALL_TIR_OP:
        return
    vdev = _first_vdevice(expr.ty)
    name = expr.args[0].name_hint
    target = home if vdev is None else vdev.target
    seen = wanted.setdefault(name, target)
    if str(seen) != str(target):
        raise ValueError(
            f"RestoreKernelTargets: kernel {name!r} is called on two targets, {seen} and "
            f"{target}; fusion crossed a device boundary"
        )


def _first_vdevice(ty: relax.Type):
    if isinstance(ty, TensorType):
        return ty.vdevice
    if isinstance(ty, TupleType):
        return next((v for v in map(_first_vdevice, ty.fields) if v is not None), None)
    return None
