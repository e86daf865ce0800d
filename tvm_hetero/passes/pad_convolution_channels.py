"""PadConvolutionChannels: CPU convolutions whose output channels no vector divides computed
over whole vectors of channels, cropped."""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.bindings import calls_one_of
from tvm_hetero.ir.mutate import bound_value, output_channels_widened, rewrite_calls
from tvm_hetero.ir.types import cpu_tensor_target
from tvm_hetero.schedules.cpu.common import vector_bits, vector_lanes
from tvm_hetero.schedules.cpu.conv import (
    CHANNELS_PER_TILE,
    WIDE_CHANNEL_TILE_VECTORS,
    conv_channel_tiled,
)

CONV_OPS = ("relax.nn.conv2d", "relax.nn.conv3d")
LAYOUTS = {"relax.nn.conv2d": ("NCHW", "OIHW"), "relax.nn.conv3d": ("NCDHW", "OIDHW")}
PAD_CHANNELS = True
"""Whether convolutions are widened to whole vectors of output channels (off: as given)."""
MAX_EXTRA = 1 / 8
"""Most zero channels, as a share of the output channels, computed so that a convolution
gets the channel-vectorized tile: 230 -> 256 and 921 -> 928 pass, 36 -> 48 does not."""


@tvm.transform.module_pass(opt_level=0, name="PadConvolutionChannels")
class PadConvolutionChannels:
    """Compute a CPU ``conv2d`` or ``conv3d`` whose output channels no vector divides over
    whole vectors of them (zero weights), then crop the channels.

    The convolution rule's channel-vectorized tile (a vector of output channels a position,
    weights packed by channel at compile time: :func:`~tvm_hetero.schedules.cpu.conv.
    channel_tiled`) needs output channels a vector divides; others got the width-vectorized
    tile. R(2+1)D's factorised convolutions have 230, 460 and 921 (torchvision's
    ``r2plus1d_18``): its 64 -> 230 1x3x3 layer of stride 2 over 16 x 56 x 56 took 31.1 ms,
    its 512 -> 921 one over 2 x 7 x 7 11.6 ms, ONNX Runtime's (which pads them to its blocked
    layout) 13.5 and 3.6; computed as 256 and 928 channels, cropped, 14.4 and 3.0 (Intel
    Xeon, two threads, each layer alone with its bias and ReLU). ``conv(x, w)`` becomes
    ``strided_slice(conv(x, w'), axes=[1], end=[O])`` with ``w'`` the constant with zero
    output channels up to the next multiple of two vectors (with AVX-512, whose channel tile
    takes two: 230 -> 256, 460 -> 480) or, where the width-vectorized tile would take fewer
    than :data:`~tvm_hetero.schedules.cpu.conv.CHANNELS_PER_TILE` channels (230, 921: not 72),
    of one, where that adds at most :data:`MAX_EXTRA` of the work and the widened convolution
    gets the channel tile. HRNet's 36 -> 72 of stride 2 over 56 x 56 ran a third slower widened
    to 80 channels, one vector a tile, than as the width tile of 8 channels.
    Numbers are unchanged (the zero channels are computed and dropped); ``FuseOps`` fuses the
    crop, the bias and the activation into the convolution's kernel.

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's), after ``WinogradConvolutions`` (which pads the channels of the convolutions
    it takes itself) and before ``PadConvolutionOutputs`` (which then sees a channel-tiled
    convolution and leaves its width) and ``LegalizeOps``. One group, ``NCHW`` / ``NCDHW``
    layouts, static shapes and constant weights (a constant, or a variable bound to one) only;
    1x1 convolutions of stride 1 without padding are the matmul rule's
    (``PadMatmulColumns`` widens those).
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        """Return a new module with the convolutions widened (``mod`` when none is)."""
        return rewrite_calls(mod, _padded)


def widened_channels(call: relax.Call, rewriter: PyExprMutator) -> int | None:
    """The output channels ``call`` is computed with, or ``None`` to leave it alone."""
    if not PAD_CHANNELS or not calls_one_of(call, CONV_OPS):
        return None
    a, ty = call.attrs, call.ty
    if (a.data_layout, a.kernel_layout) != LAYOUTS[call.op.name] or a.out_layout != a.data_layout:
        return None
    target = cpu_tensor_target(ty, rewriter.mod_)
    weight = bound_value(rewriter, call.args[1])
    if target is None or int(a.groups) != 1 or not isinstance(weight, Constant):
        return None
    shape = [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in ty.shape.values]
    if None in shape:
        return None
    weight_shape = [int(d) for d in weight.value.shape]
    channels = shape[1]
    pointwise = math.prod(weight_shape[2:]) == 1 and all(int(s) == 1 for s in a.strides)
    if pointwise and not any(int(p) for p in a.padding):
        return None  # the matmul rule's
    lanes = vector_lanes(target, tvm.DataType(ty.dtype).bits)
    if channels % lanes == 0:
        return None
    steps = [WIDE_CHANNEL_TILE_VECTORS * lanes] if vector_bits(target) >= 512 else []
    if channels % CHANNELS_PER_TILE:  # the width tile takes fewer channels: one vector serves
        steps.append(lanes)
    fitting = [
        wide
        for wide in (-(-channels // step) * step for step in steps)
        if wide - channels <= MAX_EXTRA * channels
        and conv_channel_tiled(shape, weight_shape, lanes, wide)
    ]
    return fitting[0] if fitting else None


def _padded(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    wide = widened_channels(call, rewriter)
    if wide is None:
        return None
    weights = bound_value(rewriter, call.args[1]).value.numpy()
    return output_channels_widened(rewriter, call, weights, wide)
