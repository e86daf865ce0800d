"""PadMatmulColumns: constant matmul weights on CPUs widened to whole panels at compile time."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import bound_value, output_channels_widened, rewrite_calls
from tvm_hetero.ir.types import cpu_tensor_target
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.schedules.cpu.matmul import padded_columns, weights_as_columns

MATMUL_OP = "relax.matmul"
PERMUTE_OP = "relax.permute_dims"
CONV2D_OP = "relax.nn.conv2d"


@tvm.transform.module_pass(opt_level=0, name="PadMatmulColumns")
class PadMatmulColumns:
    """Give ``x @ W`` with a constant ``W`` of ``[K, N]`` zero columns up to whole panels.

    Where no vector divides ``N`` (GPT-2's 50257 words) the CPU matmul rule pads the columns
    itself, which copies ``W`` into a padded, packed buffer on every call (GPT-2's LM head:
    150 MB a run). A constant can be padded once: ``matmul(x, W)`` (or ``W`` given as
    ``permute_dims`` of a constant, ONNX's ``Gemm`` with ``transB``) becomes
    ``strided_slice(matmul(x, W'), axes=[-1], end=[N])`` with ``W'`` the ``[K, N']`` constant,
    ``N'`` from :func:`~tvm_hetero.schedules.cpu.matmul.padded_columns`; ``PackConstantWeights``
    then lays ``W'`` out in panels. Numbers are unchanged (zero columns are computed and dropped).

    A 1x1 convolution over a 1x1 map (a squeeze-excite step, a head after global pooling) is
    the same product with its output channels as the columns: its ``[O, I, 1, 1]`` constant
    weights get zero output channels up to ``O'`` and the output is cropped along the channels
    (MobileNet-V3's 672 -> 168 squeeze packed its weights on every call and took 20x the time
    of its 168 -> 672 excite).

    A 1x1 convolution over a larger map whose output channels the matmul rule takes as its
    columns, two vectors not dividing them, is widened to two vectors the same way
    (:func:`two_vector_channels`).

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before
    ``LegalizeOps``. Only 2-D constant weights of CPU matmuls, and constant weights of one-group
    NCHW 1x1 convolutions without stride or padding over 1x1 maps, whose column count needs
    padding.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the weights padded (``mod`` when none is)."""
        return rewrite_calls(mod, _padded)


def constant_weight(expr: relax.Expr, rewriter: PyExprMutator) -> np.ndarray | None:
    """The value of a 2-D constant weight, through one ``permute_dims`` (a transposed weight),
    each through its binding in the function ``rewriter`` is rewriting."""
    expr = bound_value(rewriter, expr)
    if isinstance(expr, Constant):
        value = expr.value.numpy()
        return value if value.ndim == 2 else None
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        inner = bound_value(rewriter, expr.args[0])
        if expr.op.name != PERMUTE_OP or not isinstance(inner, Constant):
            return None
        axes = expr.attrs.axes
        value = inner.value.numpy()
        if value.ndim == 2 and (axes is None or [int(a) for a in axes] == [1, 0]):
            return value.T
    return None


def _padded(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if calls_op(call, CONV2D_OP):
        return _padded_pointwise(rewriter, call)
    if not calls_op(call, MATMUL_OP):
        return None
    ty = call.ty
    target = cpu_tensor_target(ty, rewriter.mod_)
    if target is None:
        return None
    weight = constant_weight(call.args[1], rewriter)
    if weight is None:
        return None
    cols = weight.shape[1]
    wide = padded_columns(target, tvm.DataType(ty.dtype).bits, cols)
    if wide == cols:
        return None
    padded = np.zeros((weight.shape[0], wide), weight.dtype)
    padded[:, :cols] = weight
    const = relax.const(padded)
    out = rewriter.builder_.emit(relax.op.matmul(call.args[0], const, call.attrs.out_dtype or None))
    rank = len(ty.shape.values)
    return relax.op.strided_slice(out, axes=[rank - 1], begin=[0], end=[cols])


def _padded_pointwise(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    """A 1x1 convolution over a 1x1 map with its output channels padded, then cropped."""
    a, ty = call.attrs, call.ty
    target = cpu_tensor_target(ty, rewriter.mod_)
    if target is None or (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return None
    weight = bound_value(rewriter, call.args[1])
    if not isinstance(weight, Constant) or ty.shape is None:
        return None
    value = weight.value.numpy()
    out = [int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in ty.shape.values]
    if value.ndim != 4 or value.shape[2:] != (1, 1) or int(a.groups) != 1 or None in out:
        return None
    if any(int(p) for p in a.padding) or any(int(s) != 1 for s in a.strides):
        return None
    bits, (channels, inputs) = tvm.DataType(ty.dtype).bits, value.shape[:2]
    if out[2:] == [1, 1]:
        wide = padded_columns(target, bits, channels)
    else:
        wide = two_vector_channels(target, bits, out[2] * out[3], inputs, channels)
    if wide == channels:
        return None
    return output_channels_widened(rewriter, call, value, wide)


WIDE_PANELS = True
"""Whether :func:`two_vector_channels` widens output channels one vector divides to two."""
PART_VECTOR_CHANNELS = True
"""Whether :func:`two_vector_channels` widens output channels no vector divides too."""


def two_vector_channels(
    target: tvm.target.Target, bits: int, positions: int, inputs: int, outputs: int
) -> int:  # fmt: skip
    """The output channels a 1x1 convolution over ``positions`` is computed with: ``outputs``,
    or the next multiple of two vectors where two vectors do not divide them, the padding is
    at most an eighth, and the matmul rule takes the widened channels as its columns
    (:func:`~tvm_hetero.schedules.cpu.matmul.weights_as_columns`). Channels no vector divides
    are widened too (:data:`PART_VECTOR_CHANNELS`): SqueezeNet's 1000 classes over 13 x 13 to
    1024, where its positions had been the columns, padded to 192.

    One vector wide, the rule's register tile makes one multiply-add for each load (a
    broadcast of the image, a vector of weights: 7 x 1 over 7 x 7); two wide, two (7 x 2). The
    zero channels' work is the price. Alone (Intel Xeon, family 6 model 167, two threads,
    ``benchmarks/cpu_kernels/pointwise_layers.py widened``): RegNet-X's 400 -> 400 over 7 x 7
    0.073 -> 0.065 ms, 160 -> 400 over 14 x 14 0.121 -> 0.105 (ONNX Runtime 0.098, 0.138);
    whole RegNet-X-400MF (``before_and_now.py``) 1.41x -> 1.37x ONNX Runtime's time (1.35x ->
    1.33x in an earlier run)."""
    lanes = vector_lanes(target, bits)
    wide = -(-outputs // (2 * lanes)) * 2 * lanes
    if not WIDE_PANELS or wide == outputs or 8 * (wide - outputs) > outputs:
        return outputs
    if outputs % lanes and not PART_VECTOR_CHANNELS:
        return outputs
    return wide if weights_as_columns(target, bits, positions, inputs, wide) else outputs
