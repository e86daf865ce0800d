"""ConstantsOnCPUsUncopied: a constant brought to a CPU vdevice is, to the rewrites that read
weights, the constant itself."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.attrs import COPY_OP
from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import bound_value, rewrite_calls
from tvm_hetero.ir.types import cpu_tensor_target


@tvm.transform.module_pass(opt_level=0, name="ConstantsOnCPUsUncopied")
class ConstantsOnCPUsUncopied:
    """Replace each ``to_vdevice`` of a constant to a CPU vdevice by the constant.

    ``PlaceOperators`` brings a weight to the device of the operator that reads it with a
    ``to_vdevice`` (the weight follows its consumer); a deployment's units take the weight
    into their device's library (``build.deploy.device_module``), and their rewrites see it
    as a constant. The module per-operator profiling lowers whole
    (``multi_device_lower_unfused``) kept the copies, so the rewrites that read constant
    weights (Winograd's tiles, weights gathered in place, packed panels) saw a copy and left
    an operator placed off the home device to TOPI's kernel: GPT-OSS's operators (batched
    experts) summed 74.9 ms in the profiling run that placed them on ``cpu@1`` and 11.9 ms in
    the one on ``cpu@0``, two cores alike (``tvm-hetero plan --strategy als``, AMD EPYC Zen
    4; with this pass 13.3 and 13.0); ResNet-18 wholly on ``cpu@1`` had no Winograd kernel.

    Notes
    -----
    Run after ``RealizeVDevice`` and before the rewrites that read constants, in the unfused
    build only, with ``ConstantsToKernelDevices`` after the weights are packed: one VM keeps
    every constant on its first device and a kernel checks that its arguments share a device
    id, so each kernel off the home device gets its constants copied again, as before, but
    the rewrites have seen them as constants (a deployment's units have no copies to drop).
    Constants of GPU vdevices keep their copies (device memory); so do copies of anything
    else.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module without such copies (``mod`` when there is none)."""
        return rewrite_calls(mod, _uncopied)


def _uncopied(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not calls_op(call, COPY_OP) or cpu_tensor_target(call.ty, rewriter.mod_) is None:
        return None
    value = bound_value(rewriter, call.args[0])
    return value if isinstance(value, Constant) else None
