"""TransposedConvolutionsAsPointwise: CPU transposed convolutions whose window is their stride
computed as a 1x1 convolution to every output channel's window, then laid out as the map."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import bound_value, rewrite_calls
from tvm_hetero.ir.types import cpu_op_with_static_shapes

CONV2D_TRANSPOSE_OP = "relax.nn.conv2d_transpose"
AS_POINTWISE = True
"""Whether transposed convolutions whose window is their stride are computed as 1x1 ones."""


@tvm.transform.module_pass(opt_level=0, name="TransposedConvolutionsAsPointwise")
class TransposedConvolutionsAsPointwise:
    """Compute a CPU ``conv2d_transpose`` whose window is its stride (``kh x kw``, stride
    ``(kh, kw)``, no padding, output padding or dilation, one group) as a ``conv2d`` with a
    1x1 window to ``O x kh x kw`` channels, each channel one position of an output channel's
    window, laid out as the map by a reshape and a transpose: ``y[n, o, h kh + i, w kw + j] =
    t[n, (o kh + i) kw + j, h, w]``.

    Such a layer upsamples without overlap: every input position fills a ``kh x kw`` block of
    the output of its own, a matrix product (``[O kh kw, C] @ [C, H W]``) and a layout. TVM
    legalizes it as a convolution over the input dilated by the stride, padded, with the window
    flipped: ``kh x kw`` times the products, most of them of the zeros between the input's
    positions, in a kernel the convolution rule does not take. EoMT's mask head (two 2x2 layers
    of stride 2, 1,024 channels, over 20 x 20 then 40 x 40) took 183 and 458 ms each where ONNX
    Runtime's took 24 and 95 (transformers' EoMT at 320 x 320, Intel Xeon, two threads): the
    model ran at 2.65 times ONNX Runtime's time. The 1x1 convolution is the matmul rule's; the
    layout is an element-wise kernel (a bias, a norm's steps fuse into it).

    Notes
    -----
    Run after ``RealizeVDevice`` and before ``PadConvolutionChannels`` and ``LegalizeOps``.
    NCHW / IOHW layouts, static shapes only. The weights, where they are a constant, are laid
    out at compile time; otherwise the layout is a transpose of the weights in the graph.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        """Return a new module with such convolutions rewritten (``mod`` when none is)."""
        return rewrite_calls(mod, _as_pointwise)


def rewritten(call: relax.Call, mod: tvm.IRModule) -> bool:
    """Whether ``call`` is a CPU ``conv2d_transpose`` this pass computes as a 1x1 one."""
    layouts = ("NCHW", "IOHW", "NCHW")
    if not AS_POINTWISE or not cpu_op_with_static_shapes(call, CONV2D_TRANSPOSE_OP, layouts, mod):
        return False
    a, ty, kernel = call.attrs, call.ty, call.args[1].ty.shape
    if int(a.groups) != 1 or (a.out_dtype and str(a.out_dtype) not in ("void", str(ty.dtype))):
        return False
    window = [int(k) for k in kernel.values[2:]]
    plain = [int(v) for v in (*a.padding, *a.output_padding)] == [0] * 6
    dilation = [int(d) for d in a.dilation]
    return plain and [int(s) for s in a.strides] == window and dilation == [1, 1]


def pointwise_weights(w: np.ndarray) -> np.ndarray:
    """The 1x1 weights ``(O kh kw, C, 1, 1)`` of transposed-convolution weights ``w`` (``(C,
    O, kh, kw)``): channel ``(o kh + i) kw + j`` is position ``(i, j)`` of output channel
    ``o``'s window."""
    c, o, kh, kw = w.shape
    return np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(o * kh * kw, c, 1, 1))


def _as_pointwise(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not rewritten(call, rewriter.mod_):
        return None
    bb = rewriter.builder_
    n, _, h, w = (int(d) for d in call.args[0].ty.shape.values)
    c, o, kh, kw = (int(d) for d in call.args[1].ty.shape.values)
    weight = bound_value(rewriter, call.args[1])
    if isinstance(weight, Constant):
        weight = relax.const(pointwise_weights(weight.value.numpy()))
    else:
        moved = bb.emit(relax.op.permute_dims(call.args[1], [1, 2, 3, 0]))
        weight = bb.emit(relax.op.reshape(moved, (o * kh * kw, c, 1, 1)))
    out_dtype = call.attrs.out_dtype
    windows = bb.emit(relax.op.nn.conv2d(call.args[0], weight, out_dtype=out_dtype or None))
    split = bb.emit(relax.op.reshape(windows, (n, o, kh, kw, h, w)))
    laid_out = bb.emit(relax.op.permute_dims(split, [0, 1, 4, 2, 5, 3]))
    return relax.op.reshape(laid_out, (n, o, h * kh, w * kw))
