"""ConstantsToKernelDevices: a kernel on a CPU vdevice other than the home one reads its
constants copied to that device."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero._compat import TensorType, TupleType, vdevice_equal
from tvm_hetero.ir.attrs import CALL_TIR_OP
from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import rewrite_calls


@tvm.transform.module_pass(opt_level=0, name="ConstantsToKernelDevices")
class ConstantsToKernelDevices:
    """Give each constant operand of a ``call_tir`` on a CPU vdevice other than the home one a
    ``to_vdevice`` to that vdevice, emitted before the call.

    The other half of ``ConstantsOnCPUsUncopied`` in the module per-operator profiling lowers
    whole (``multi_device_lower_unfused``): that pass lets the rewrites see the weights of an
    operator placed off the home device as constants; this one, after the kernels and their
    packed weights are made, brings each to its kernel's device again, since one VM keeps
    every constant on its first device and a kernel checks that its arguments share a device
    id (a VM runs vdevice ``k`` of a CPU as ``cpu(k)``). The copies are made on every run, as
    ``PlaceOperators``' were; ``profiling.model_run.kernel_sequence`` files them under no
    operator.

    Notes
    -----
    Run after ``PackConstantWeights`` (the constants the kernels read), in the unfused build
    only (a deployment's units run on one device each). Kernels of the home vdevice, of
    other kinds of device, and operands that are not constants are left as they are.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the copies (``mod`` when no kernel needs one)."""
        vdevices = list(mod.global_infos.get("vdevice", []))
        if len(vdevices) < 2:
            return mod
        return rewrite_calls(mod, lambda rewriter, call: _copied(rewriter, call, vdevices[0]))


def _kernel_vdevice(ty: relax.Type) -> relax.VDevice | None:
    """The vdevice a ``call_tir`` of type ``ty`` writes on: its tensor's, or its first
    tensor's where it returns several (a recurrent layer's loop kernel: outputs and states;
    taken for none until 2026-12-08, so Lee et al.'s profiling run of an ONNX LSTM placed off
    the home device stopped at the kernel, its packed weights on the home device)."""
    if isinstance(ty, TensorType):
        return ty.vdevice
    if isinstance(ty, TupleType):
        return next((f.vdevice for f in ty.fields if isinstance(f, TensorType)), None)
    return None


def _copied(rewriter: PyExprMutator, call: relax.Call, home) -> relax.Expr | None:
    if not calls_op(call, CALL_TIR_OP):
        return None
    vdevice = _kernel_vdevice(call.ty)
    if vdevice is None or vdevice.target.kind.name != "llvm" or vdevice_equal(vdevice, home):
        return None
    operands = call.args[1].fields
    if not any(isinstance(a, Constant) for a in operands):
        return None
    moved = [
        rewriter.builder_.emit(relax.op.to_vdevice(a, vdevice)) if isinstance(a, Constant) else a
        for a in operands
    ]
    return relax.Call(call.op, [call.args[0], relax.Tuple(moved), *call.args[2:]], call.attrs,
                      call.ty_args)  # fmt: skip
