"""GroupedConvolutionsByGroup: CPU grouped convolutions computed with an explicit group axis."""

from __future__ import annotations

import tvm
from tvm import relax, te, topi
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import bound_value, rewrite_calls
from tvm_hetero.ir.types import cpu_op_with_static_shapes, cpu_tensor_target
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.schedules.cpu.conv import channel_tiled, depthwise_channel_tiled

CONV2D_OP = "relax.nn.conv2d"
CONV1D_OP = "relax.nn.conv1d"
LAYOUTS = {CONV2D_OP: ("NCHW", "OIHW", "NCHW"), CONV1D_OP: ("NCW", "OIW", "NCW")}


@tvm.transform.module_pass(opt_level=0, name="GroupedConvolutionsByGroup")
class GroupedConvolutionsByGroup:
    """Compute each NCHW ``conv2d`` (and NCW ``conv1d``) of ``1 < groups < channels`` on a CPU
    vdevice as a kernel whose output is ``(N, groups, O / groups, H', W')`` (``(N, groups,
    O / groups, L')``), then reshaped to ``(N, O, H', W')`` (``(N, O, L')``).

    TOPI's grouped convolution reads its input at ``(f // Og) * Cg + rc``: the output channel
    ``f`` picks the group, so the convolution rule finds no output-channel axis the input does
    not use and reuses no input load across channels (a 3x3 convolution of 256 channels in 32
    groups at 28 x 28 ran at 2.4-4.5x ONNX Runtime's time). With the group as an axis of its
    own, the channels within a group are that axis: 0.52 ms against 0.93 for TOPI's kernel
    (one VM timing, AMD EPYC, 2 threads). wav2vec 2.0's positional convolution (a ``conv1d`` of
    768 channels in 16 groups, 128 taps) ran ten times faster by group than TOPI's kernel, level
    with ONNX Runtime (``benchmarks/cpu_kernels/convolutions_1d.py``). Numbers are equal up to
    the order of the sums.

    Notes
    -----
    Run after ``RealizeVDevice`` and before ``PadConvolutionOutputs`` and ``LegalizeOps``.
    Depthwise convolutions (one channel a group), other layouts, symbolic shapes, an
    ``out_dtype`` other than the input's, GPU convolutions and those whose groups a vector of
    channels fills (:func:`channel_vectorized`) are left alone.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions rewritten (``mod`` when none is)."""
        return rewrite_calls(mod, _by_group)


def rewritten(call: relax.Call, mod: IRModule) -> bool:
    """Whether ``call`` is a convolution this pass rewrites."""
    op = getattr(call.op, "name", None)
    if op not in LAYOUTS or not cpu_op_with_static_shapes(call, op, LAYOUTS[op], mod):
        return False
    groups, channels = int(call.attrs.groups), int(call.args[0].ty.shape.values[1])
    same_dtype = call.ty.dtype == call.args[0].ty.dtype  # the kernel sums in the input's type
    return 1 < groups < channels and same_dtype


def by_group(data: te.Tensor, weight: te.Tensor, strides, padding, dilation, groups: int):
    """The grouped convolution as ``(N, groups, O / groups, H', W')``."""
    n, _, h, w = (int(v) for v in data.shape)
    o, cg, kh, kw = (int(v) for v in weight.shape)
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    og = o // groups
    ho = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wo = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    padded = topi.nn.pad(data, [0, 0, top, left], [0, 0, bottom, right])
    rc = te.reduce_axis((0, cg), "rc")
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    return te.compute(
        (n, groups, og, ho, wo),
        lambda b, g, f, y, x: te.sum(
            padded[b, g * cg + rc, y * sh + ry * dh, x * sw + rx * dw]
            * weight[g * og + f, rc, ry, rx],
            axis=[rc, ry, rx],
        ),
        name="conv2d_by_group",
    )


def by_group_1d(data: te.Tensor, weight: te.Tensor, strides, padding, dilation, groups: int):
    """The grouped 1-D convolution as ``(N, groups, O / groups, L')``."""
    n, _, length = (int(v) for v in data.shape)
    o, cg, k = (int(v) for v in weight.shape)
    (s,), (d,), (left, right) = strides, dilation, padding
    og = o // groups
    lo = (length + left + right - d * (k - 1) - 1) // s + 1
    padded = topi.nn.pad(data, [0, 0, left], [0, 0, right])
    rc, rx = te.reduce_axis((0, cg), "rc"), te.reduce_axis((0, k), "rx")
    return te.compute(
        (n, groups, og, lo),
        lambda b, g, f, x: te.sum(
            padded[b, g * cg + rc, x * s + rx * d] * weight[g * og + f, rc, rx], axis=[rc, rx]
        ),
        name="conv1d_by_group",
    )


def channel_vectorized(rewriter: PyExprMutator, call: relax.Call) -> bool:
    """Whether ``call``, a grouped or depthwise 2-D convolution (static shapes), keeps TOPI's
    kernel for the convolution rule's channel-vectorized tile: constant weights and groups of
    output channels the CPU's lanes divide (:func:`~tvm_hetero.schedules.cpu.conv.channel_tiled`;
    ``PackConstantWeights`` packs them by channel), or a depthwise one over rows that tile takes
    (:func:`~tvm_hetero.schedules.cpu.conv.depthwise_channel_tiled`). A vector of one group's
    channels shares every input element: by group, the register tile's channels ran RegNet-X's
    groups of 16 at up to 2.4x ONNX Runtime's time on 56 x 56 maps with stride 2
    (``benchmarks/cpu_kernels/grouped_convs.py``)."""
    if call.op.name != CONV2D_OP or not isinstance(bound_value(rewriter, call.args[1]), Constant):
        return False
    target = cpu_tensor_target(call.ty, rewriter.mod_)
    channels, groups = int(call.ty.shape.values[1]), int(call.attrs.groups)
    width = int(call.ty.shape.values[3])
    lanes = vector_lanes(target, tvm.DataType(call.ty.dtype).bits)
    inputs = call.args[0].ty.shape.values[1]
    if groups == channels and isinstance(inputs, tvm.tirx.IntImm) and int(inputs) == channels:
        return depthwise_channel_tiled(width, channels, lanes, int(call.attrs.strides[1]))
    return channel_tiled(width, channels, lanes, channels // groups)


def _by_group(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not rewritten(call, rewriter.mod_) or channel_vectorized(rewriter, call):
        return None
    a = call.attrs
    attrs = [tuple(int(v) for v in getattr(a, k)) for k in ("strides", "padding", "dilation")]
    one_d = call.op.name == CONV1D_OP
    grouped = rewriter.builder_.call_te(
        by_group_1d if one_d else by_group, call.args[0], call.args[1], *attrs,
        int(a.groups), primfunc_name_hint="conv1d_by_group" if one_d else "conv2d_by_group",
    )  # fmt: skip
    out = rewriter.builder_.emit(grouped)
    return relax.op.reshape(out, call.ty.shape)
