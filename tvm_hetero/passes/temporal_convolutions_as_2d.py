"""TemporalConvolutionsAs2D: CPU 3-D convolutions with a window along time only computed as
2-D convolutions over (time, height x width)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import bound_value, rewrite_calls
from tvm_hetero.ir.types import cpu_tensor_target
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.schedules.cpu.conv import conv_channel_tiled

CONV3D_OP = "relax.nn.conv3d"
AS_2D = True
"""Whether temporal convolutions the channel tile does not take are computed as 2-D ones."""


@tvm.transform.module_pass(opt_level=0, name="TemporalConvolutionsAs2D")
class TemporalConvolutionsAs2D:
    """Compute a CPU ``conv3d`` whose window spans time only (``kt x 1 x 1``, stride and
    dilation along time only, no padding across height or width) as a ``conv2d`` with a
    ``kt x 1`` window over the input seen as ``(N, C, T, H * W)``, reshaped back.

    Such a convolution (S3D's first temporal layer, 64 channels over 16 x 112 x 112 with a
    window of 7 frames and stride 2) went to the convolution rule's 3-D path where its rows
    are too wide for the channel-vectorized tile: a padded copy of the whole input, then tasks
    of one block of 8 channels each reading every input channel's frames again; 91 ms where
    ONNX Runtime took 38. As a 2-D convolution it gets the 2-D path's row tasks and its
    reduction blocks for L1: 36 ms (Intel Xeon, two threads, the layer alone with its bias
    and ReLU). The reshapes move no data (NCDHW is contiguous over height and width).
    Convolutions the channel tile takes (rows up to 56 wide with AVX-512) stay 3-D: as 2-D
    their 3x1x1 layers over 8 x 56 x 56 ran slower (45 ms against 40 then, 25 now with
    every block of channels in a task). With AVX2 the channel tile takes rows of at most 5
    columns, so such layers over wider rows all become 2-D: built for Haswell and run on the
    same Xeon, 1.4 to 4.7 times faster so.

    Notes
    -----
    Run after ``RealizeVDevice`` and before ``PadConvolutionChannels`` and ``LegalizeOps``.
    NCDHW / OIDHW layouts, one group, static shapes only.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        """Return a new module with such convolutions in 2-D (``mod`` when none is)."""
        return rewrite_calls(mod, _as_2d)


def computed_as_2d(call: relax.Call, mod: tvm.IRModule) -> bool:
    """Whether ``call`` is a CPU ``conv3d`` with a window along time only that the
    channel-vectorized tile would not take (:func:`~tvm_hetero.schedules.cpu.conv.
    channel_tiled`)."""
    if not AS_2D or not calls_op(call, CONV3D_OP):
        return False
    a, ty = call.attrs, call.ty
    if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCDHW", "OIDHW", "NCDHW"):
        return False
    target, kernel, data = cpu_tensor_target(ty, mod), call.args[1].ty.shape, call.args[0].ty.shape
    if target is None or kernel is None or data is None or int(a.groups) != 1:
        return False
    shapes = [*ty.shape.values, *kernel.values, *data.values]
    if not all(isinstance(d, tvm.tirx.IntImm) for d in shapes):
        return False
    window = [int(k) for k in kernel.values[2:]]
    spatial = [int(s) for s in a.strides[1:]] + [int(d) for d in a.dilation[1:]]
    padding = [int(p) for p in a.padding]
    if window[1:] != [1, 1] or spatial != [1, 1, 1, 1] or any(padding[1:3] + padding[4:]):
        return False
    lanes = vector_lanes(target, tvm.DataType(ty.dtype).bits)
    out_shape = [int(d) for d in ty.shape.values]
    return not conv_channel_tiled(out_shape, [int(k) for k in kernel.values], lanes)


def _as_2d(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not computed_as_2d(call, rewriter.mod_):
        return None
    a = call.attrs
    n, c, t, h, w = (int(d) for d in call.args[0].ty.shape.values)
    o, i, kt, _, _ = (int(d) for d in call.args[1].ty.shape.values)
    weight = bound_value(rewriter, call.args[1])
    if isinstance(weight, Constant):
        weight = relax.const(np.ascontiguousarray(weight.value.numpy().reshape(o, i, kt, 1)))
    else:
        weight = rewriter.builder_.emit(relax.op.reshape(call.args[1], (o, i, kt, 1)))
    data = rewriter.builder_.emit(relax.op.reshape(call.args[0], (n, c, t, h * w)))
    before, after = int(a.padding[0]), int(a.padding[3])
    conv = relax.op.nn.conv2d(
        data, weight, strides=(int(a.strides[0]), 1), padding=(before, 0, after, 0),
        dilation=(int(a.dilation[0]), 1), out_dtype=a.out_dtype or None,
    )  # fmt: skip
    frames = int(call.ty.shape.values[2])
    return relax.op.reshape(rewriter.builder_.emit(conv), (n, o, frames, h, w))
