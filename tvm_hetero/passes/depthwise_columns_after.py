"""DepthwiseColumnsAfter: strided CPU depthwise convolutions as a convolution with the row stride
only, then every ``s``-th column."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.types import cpu_op_with_static_shapes
from tvm_hetero.passes.grouped_convolutions_by_group import channel_vectorized
from tvm_hetero.schedules.cpu import conv

CONV2D_OP = "relax.nn.conv2d"
MIN_COLUMNS = 8
"""Output columns from which the rewrite pays: a 3x3 of 576 channels to 7 x 7 took 63 us as it
was and 75 us rewritten (its 14 columns computed 16 wide, then half of them taken); to 14 x 14
and wider the rewrite was faster (``benchmarks/cpu_kernels/strided_depthwise.py``)."""


@tvm.transform.module_pass(opt_level=0, name="DepthwiseColumnsAfter")
class DepthwiseColumnsAfter:
    """Compute each NCHW depthwise ``conv2d`` on a CPU vdevice with a column stride ``s > 1``
    that the convolution rule's row tile does not read as it is (not in
    ``conv.ROW_TILED_STEPS``: 3 and more, since
    :class:`~tvm_hetero.passes.StridedLoadsAsShuffles` reads a stride of 2 as whole vectors) as
    ``strided_slice(conv2d(x, w, strides=(sh, 1)), axes=[3], strides=[s])``.

    The convolution rule vectorizes a row of output columns; with a column stride each lane
    reads its own input column, and TVM's code for such a read is one scalar load and insert a
    lane: MobileNets' and EfficientNets' strided depthwise layers ran at 1.5-2.6x ONNX
    Runtime's time. With the row stride only, a vector of outputs reads consecutive columns
    (one vector load a tap); it computes ``s`` times the columns, but a depthwise tap is one
    multiply-add, and the subsample is a copy of the output's size: a kernel of its own with the
    element-wise steps after it (``FuseOps`` fuses an element-wise step into a convolution's
    kernel, not a strided slice: MnasNet's 48-channel layer over 112 x 112 runs as the
    convolution, then the slice with its ReLU), included in the timings below (a window one
    column wide, without column padding, takes the input's columns first: MobileOne's strided
    1x1 branches). Each layer alone, built and timed as a model
    (``benchmarks/cpu_kernels/strided_depthwise.py``, Zen 4, two threads, 5 interleaved
    rounds): 1.15-1.45x faster. In whole models those layers are a small share, and the gain
    is within the host's noise (``before_and_now.py``, pass on against off in the same rounds:
    MobileNet v2 5.98 -> 5.79 ms, then 6.17 -> 6.19; MobileNet v3 large 5.43 -> 5.27, then
    5.41 -> 5.33; EfficientNet-B0 10.46 -> 10.19, then 14.64 -> 15.16 in a slow period). The
    numbers are the same products in the same order.

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before ``PadConvolutionOutputs``. One input channel a group and as many
    output channels as input channels, no dilation along the width, at least
    :data:`MIN_COLUMNS` output columns, static shapes; the unfused
    build (one operator, one kernel) keeps the convolution, and so does one with constant
    weights that the convolution rule vectorizes by channel
    (:func:`~tvm_hetero.schedules.cpu.conv.depthwise_channel_tiled`: output rows up to 14
    columns, whole vectors of channels), whose tile reads one vector a position whatever the
    stride.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions rewritten (``mod`` when none is)."""
        return rewrite_calls(mod, _columns_after)


def rewritten(call: relax.Call, mod: IRModule) -> bool:
    """Whether ``call`` is a convolution this pass rewrites."""
    if not cpu_op_with_static_shapes(call, CONV2D_OP, ("NCHW", "OIHW", "NCHW"), mod):
        return False
    a = call.attrs
    channels = int(call.args[0].ty.shape.values[1])
    outputs, per_group = (int(d) for d in call.args[1].ty.shape.values[:2])
    return (
        int(a.groups) == channels == outputs
        and per_group == 1
        and int(a.strides[1]) not in conv.ROW_TILED_STEPS
        and int(a.dilation[1]) == 1
        and int(call.ty.shape.values[3]) >= MIN_COLUMNS
    )


def _columns_after(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not rewritten(call, rewriter.mod_) or channel_vectorized(rewriter, call):
        return None  # the channel-vectorized tile reads a vector a position whatever the stride
    a = call.attrs
    x, w = call.args
    step = int(a.strides[1])
    # one column a window and no column padding: take the input's columns first
    columns_first = int(w.ty.shape.values[3]) == 1 and int(a.padding[1]) == int(a.padding[3]) == 0
    if columns_first:
        width = int(x.ty.shape.values[3])
        x = rewriter.builder_.emit(
            relax.op.strided_slice(x, axes=[3], begin=[0], end=[width], strides=[step])
        )
    rows = relax.op.nn.conv2d(
        x, w, (int(a.strides[0]), 1), a.padding, a.dilation, a.groups,
        "NCHW", "OIHW", "NCHW", a.out_dtype or None,
    )  # fmt: skip
    if columns_first:
        return rows
    last = (int(call.ty.shape.values[3]) - 1) * step + 1  # one past the last column read
    return relax.op.strided_slice(
        rewriter.builder_.emit(rows), axes=[3], begin=[0], end=[last], strides=[step]
    )
