"""InferKernelVDevices: give every ``call_tir`` output the vdevice of its inputs."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero._compat import TensorType, TupleType, VDevice, renew_defs
from tvm_hetero.ir.attrs import CALL_TIR_OP
from tvm_hetero.ir.bindings import calls_op


@tvm.transform.module_pass(opt_level=0, name="InferKernelVDevices")
class InferKernelVDevices:
    """Repair ``call_tir`` outputs that legalization left without a vdevice.

    Some legalizations (``nn.conv2d`` in 0.27) emit ``call_tir`` with an output type that has no
    vdevice and a kernel name without a target suffix; the VM then allocates the output on device
    0 while the inputs live elsewhere. This pass sets the output vdevice to that of the tensor
    inputs and, when one kernel is called on two targets, gives each target its own copy.

    Notes
    -----
    Run after ``LegalizeOps`` and before ``FuseOps``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module; the input is unchanged."""
        return _Repair(mod).run()


def _vdevice_of(expr: relax.Expr) -> VDevice | None:
    ty = expr.ty
    if isinstance(ty, TensorType):
        return ty.vdevice
    if isinstance(ty, TupleType) and isinstance(expr, relax.Tuple):
        return next((v for v in map(_vdevice_of, expr.fields) if v is not None), None)
    return None


def _with(ty: relax.Type, vdev: VDevice) -> relax.Type:
    if isinstance(ty, TensorType):
        if ty.vdevice is not None:
            return ty
        return TensorType(ty.shape, ty.dtype, vdev) if ty.shape is not None else ty
    if isinstance(ty, TupleType):
        return relax.TupleType([_with(f, vdev) for f in ty.fields])
    return ty


@mutator
class _Repair(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.mod_ = mod
        self.target_of: dict[str, str] = {}
        self.copies: dict[tuple[str, str], tvm.ir.GlobalVar] = {}

    def run(self) -> IRModule:
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get()

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not calls_op(call, CALL_TIR_OP):
            return call
        vdev = _vdevice_of(call.args[1])
        if vdev is None:
            return call
        kernel = self._kernel_for(call.args[0], vdev.target)
        ty_args = [_with(t, vdev) for t in call.ty_args]
        return relax.Call(call.op, [kernel, *call.args[1:]], call.attrs, ty_args)

    def _kernel_for(self, gv: tvm.ir.GlobalVar, target: tvm.target.Target) -> tvm.ir.GlobalVar:
        """The kernel to call on ``target``: the original, or a per-target copy if it is shared.

        Targets differ by kind (``llvm`` / ``cuda``) or by attributes of one kind (a serial and a
        parallel CPU: ``num-cores`` 1 and N). The copy carries its target (which also keeps the
        BlockBuilder from merging it back into the structurally equal original).
        """
        name, key = gv.name_hint, str(target)
        first = self.target_of.setdefault(name, key)
        if first == key:
            return gv
        if (name, key) not in self.copies:
            copy = renew_defs(self.mod_[gv]).with_attr("target", target)
            self.copies[(name, key)] = self.builder_.add_func(copy, f"{name}_{target.kind.name}")
        return self.copies[(name, key)]
