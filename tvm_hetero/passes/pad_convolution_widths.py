"""PadConvolutionWidths: CPU convolutions computed to a width the vector divides, then cropped."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero.ir.mutate import mutate_functions
from tvm_hetero.ir.types import cpu_tensor_target
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.schedules.cpu.conv import vector_width

CONV2D_OP = "relax.nn.conv2d"


@tvm.transform.module_pass(opt_level=0, name="PadConvolutionWidths")
class PadConvolutionWidths:
    """Widen NCHW ``conv2d``\\ s on CPU vdevices whose output width has no good vector.

    The CPU convolution rule vectorizes the output width by its largest divisor up to the
    vector lanes: SqueezeNet's 13-wide maps get 1 lane, 27 and 111 get 3, 55 gets 5, and a
    vector costs about the same with any number of lanes (a 3x3 convolution at width 13 ran at
    a fifth of the rate of width 14). Where a slightly wider output takes fewer vectors per row
    (:func:`~tvm_hetero.schedules.cpu.conv.vector_width`), the convolution gets more padding on
    the right (its stride times the extra columns) and a ``strided_slice`` crops the columns
    back: ``conv2d(x, w, padding=(t, l, b, r))`` becomes
    ``strided_slice(conv2d(x, w, padding=(t, l, b, r + s * (W' - W))), axes=[3], end=[W])``.
    Numbers are unchanged (the extra columns read zero padding and are dropped). Depthwise and
    grouped convolutions are widened to whole vectors (14 to 16).

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before
    ``LegalizeOps``. Static shapes only; other layouts, GPU convolutions and widths that already
    vectorize well are left alone. The crop is a separate injective kernel (``FuseOps`` does not
    fuse a slice into a convolution), so the bias and activation run there too.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions widened (``mod`` when none is)."""
        return mutate_functions(mod, _Widen(mod))


def widened(call: relax.Call, mod: IRModule) -> int | None:
    """The output width ``call`` should be computed at, or ``None`` to leave it alone."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == CONV2D_OP):
        return None
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return None
    ty = call.ty
    target = cpu_tensor_target(ty, mod)
    if target is None or not isinstance(ty.shape.values[3], tvm.tirx.IntImm):
        return None
    width = int(ty.shape.values[3])
    lanes = vector_lanes(target, tvm.DataType(ty.dtype).bits)
    wide = vector_width(width, lanes, whole=int(attrs.groups) > 1)[0]
    return wide if wide != width else None


@mutator
class _Widen(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.mod_ = mod

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        wide = widened(call, self.mod_)
        if wide is None:
            return call
        a = call.attrs
        width = int(call.ty.shape.values[3])
        top, left, bottom, right = (int(p) for p in a.padding)
        padding = (top, left, bottom, right + int(a.strides[1]) * (wide - width))
        conv = self.builder_.emit(relax.op.nn.conv2d(
            call.args[0], call.args[1], a.strides, padding, a.dilation, a.groups,
            a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype or None,
        ))  # fmt: skip
        return relax.op.strided_slice(conv, axes=[3], begin=[0], end=[width])
