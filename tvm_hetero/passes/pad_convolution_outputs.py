"""PadConvolutionOutputs: CPU convolutions computed over an output their tile divides, cropped."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import bound_value, rewrite_calls
from tvm_hetero.ir.types import cpu_tensor_target
from tvm_hetero.passes.grouped_convolutions_by_group import channel_vectorized
from tvm_hetero.passes.strided_loads_as_shuffles import MAX_STRIDE
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.schedules.cpu.conv import (
    MIN_WIDTH,
    channel_tile_width,
    channel_tiled,
    computed_rows,
    vector_width,
)

CONV2D_OP = "relax.nn.conv2d"


SHUFFLED_STRIDES = True
"""Whether a grouped or depthwise convolution whose column stride
:class:`~tvm_hetero.passes.StridedLoadsAsShuffles` reads as whole vectors and a permute (up to
its ``MAX_STRIDE``) is widened as one of unit stride is, to whole vectors (MnasNet's 48
channels from 112 x 112: 56 columns computed 64 wide in vectors of 16, not 56 in vectors of
14). Its vectors of 14 were each read as pieces of 8, 4 and 2 floats put together before the
permute. Off, every strided one counts as read lane by lane (the switch its benchmark turns)."""


def gathered_stride(step: int) -> bool:
    """Whether a grouped or depthwise convolution with column stride ``step`` reads its input
    lane by lane (:func:`~tvm_hetero.schedules.cpu.conv.vector_width`'s ``gathered``): a stride
    over :data:`~tvm_hetero.passes.strided_loads_as_shuffles.MAX_STRIDE`, or any stride with
    :data:`SHUFFLED_STRIDES` off."""
    return step > (MAX_STRIDE if SHUFFLED_STRIDES else 1)


@tvm.transform.module_pass(opt_level=0, name="PadConvolutionOutputs")
class PadConvolutionOutputs:
    """Compute NCHW ``conv2d``\\ s on CPU vdevices over an output the register tile divides, then
    crop it.

    Widths: the CPU convolution rule vectorizes the output width by its largest divisor up to
    the vector lanes: SqueezeNet's 13-wide maps would get 1 lane, 27 and 111 get 3, ResNet's 28,
    14 and 7 get 7, and a vector of fewer lanes costs nearly as much as a whole one (a 3x3
    convolution at width 13 ran at a fifth of the rate of width 14, one at width 28 took
    1.2-1.3x the time of one at width 32). The output is computed at whole vectors, depthwise
    and grouped convolutions whose column stride is read lane by lane (over
    :class:`~tvm_hetero.passes.StridedLoadsAsShuffles`' ``MAX_STRIDE``:
    :func:`gathered_stride`) at the fewest vectors per row
    (:func:`~tvm_hetero.schedules.cpu.conv.vector_width`: 13 to 16, 28 to 32; lane by lane,
    13 to 14 and 28 stays).

    Rows: where the rows are odd and so are the width's vectors, the rule's register tile would
    be one vector of one row; one more row is computed instead, so it tiles two
    (:func:`~tvm_hetero.schedules.cpu.conv.computed_rows`: Inception v3's 71 and 147 rows,
    ResNet's last 7; ordinary convolutions only, from 7 rows and 4 whole vectors wide).

    Channel tiles: with AVX-512, a convolution with constant weights a few columns short of
    the wide channel-vectorized tile is computed that much wider instead, rows unchanged
    (:func:`~tvm_hetero.schedules.cpu.conv.channel_tile_width`: SqueezeNet's 13, 27 and 55 at
    14, 28 and 56, not 16, 32 and 64; Inception v3's 17 at 18, not 32), and its weights are
    then packed by channel.

    The convolution gets more padding on the right and at the bottom (its stride times the
    extra columns or rows) and a ``strided_slice`` crops them back:
    ``conv2d(x, w, padding=(t, l, b, r))`` becomes
    ``strided_slice(conv2d(x, w, padding=(t, l, b + s * (H' - H), r + s * (W' - W))),
    axes=[2, 3], end=[H, W])`` (only the axes that grew). Numbers are unchanged (the extra
    columns and rows read zero padding and are dropped).

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before ``LegalizeOps``. Static shapes only; other layouts, GPU convolutions
    and widths of whole vectors (or under 4) are left alone; so are convolutions with constant
    weights (a constant, or a variable bound to one: a unit's weights on a device other than
    home) that the convolution rule vectorizes by output channel instead
    (:func:`~tvm_hetero.schedules.cpu.conv.channel_tiled`: rows of 4-5 columns too), and 1x1
    convolutions with stride 1 and no padding: the matmul rule takes them as weights x image
    and pads the columns itself (widened, each got a padded copy of its image and a crop pass,
    and models built on them ran 1.2-1.5x slower). ``FuseOps`` fuses the crop, the bias and the
    activation into the convolution's kernel, where the rule leaves them a vectorized loop
    after the tile (a crop cannot be folded into it).
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions padded (``mod`` when none is)."""
        return rewrite_calls(mod, _padded)


def computed_output(
    call: relax.Call, mod: IRModule, rewriter: PyExprMutator
) -> tuple[tuple[int, int], tuple[int, int, int, int]] | None:
    """The output rows and width ``call`` should be computed at and the padding that gives
    them, or ``None`` to leave it alone.

    The weights are read through their binding in the function ``rewriter`` is rewriting
    (:func:`~tvm_hetero.ir.mutate.bound_value`), so that weights bound to a variable first (a
    unit's weights on a device other than home, once ``build.deploy.device_module`` dropped
    their copy) count as the constants ``FoldConstant`` makes them, as ``PackConstantWeights``
    will see them."""
    if not calls_op(call, CONV2D_OP):
        return None
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return None
    ty, data = call.ty, call.args[0].ty
    target = cpu_tensor_target(ty, mod)
    static = [*ty.shape.values[1:], data.shape.values[3]]
    if target is None or not all(isinstance(d, tvm.tirx.IntImm) for d in static):
        return None
    if _is_pointwise(call):
        return None  # a matmul: the matmul rule pads its columns itself
    channels, rows, width = (int(d) for d in ty.shape.values[1:])
    lanes = vector_lanes(target, tvm.DataType(ty.dtype).bits)
    constant = isinstance(bound_value(rewriter, call.args[1]), Constant)
    groups, stride = int(attrs.groups), [int(s) for s in attrs.strides]
    inputs = data.shape.values[1]
    inputs = int(inputs) if isinstance(inputs, tvm.tirx.IntImm) else 0
    if groups > 1:
        tiled = channel_vectorized(rewriter, call)  # grouped or depthwise, constant weights
    else:
        tiled = constant and channel_tiled(width, channels, lanes, None, inputs, rows)
    if tiled:
        return None  # its weights are packed by channel: the rule's vector is channels
    top, left, bottom, right = (int(p) for p in attrs.padding)
    if constant and groups == 1:  # a few columns more, and the weights are packed by channel
        wide = channel_tile_width(width, channels, lanes, inputs, rows)
        if wide is not None:
            return (rows, wide), (top, left, bottom, right + stride[1] * (wide - width))
    wide, vector = vector_width(width, lanes, groups > 1 and gathered_stride(stride[1]))
    right += stride[1] * (wide - width)
    columns = int(data.shape.values[3]) + left + right  # of the padded input
    reach = int(attrs.dilation[1]) * (int(call.args[1].ty.shape.values[3]) - 1) + 1
    phases = -columns % stride[1]
    if groups == 1 and phases and (columns + phases - reach) // stride[1] + 1 == wide:
        right += phases  # the rule lays the input out by column phase: contiguous vectors
    contiguous = stride[1] == 1 or (groups == 1 and (columns + phases) % stride[1] == 0)
    tall = rows
    if groups == 1 and contiguous and width >= MIN_WIDTH:
        tall = computed_rows(rows, wide // vector, channels)
    bottom += stride[0] * (tall - rows)
    padding = (top, left, bottom, right)
    if padding == tuple(int(p) for p in attrs.padding):
        return None
    return (tall, wide), padding


def _is_pointwise(call: relax.Call) -> bool:
    """A 1x1 convolution with stride 1 and no padding: weights x image, the matmul rule's."""
    kernel = call.args[1].ty.shape
    a = call.attrs
    return (
        kernel is not None
        and all(isinstance(k, tvm.tirx.IntImm) and int(k) == 1 for k in kernel.values[2:])
        and all(int(s) == 1 for s in a.strides)
        and all(int(p) == 0 for p in a.padding)
    )


def _padded(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    computed = computed_output(call, rewriter.mod_, rewriter)
    if computed is None:
        return None
    (tall, wide), padding = computed
    a = call.attrs
    conv = relax.op.nn.conv2d(
        call.args[0], call.args[1], a.strides, padding, a.dilation, a.groups,
        a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype or None,
    )  # fmt: skip
    shape = [int(d) for d in call.ty.shape.values[2:]]
    axes = [2 + i for i, n in enumerate((tall, wide)) if n != shape[i]]
    if not axes:  # only the input's columns grew, to whole phases: the output is as it was
        return conv
    return relax.op.strided_slice(
        rewriter.builder_.emit(conv), axes=axes, begin=[0] * len(axes),
        end=[shape[i - 2] for i in axes],
    )  # fmt: skip
