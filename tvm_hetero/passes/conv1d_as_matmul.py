"""Conv1dAsMatmul: CPU 1-D convolutions as a gather of their windows and one matrix product."""

from __future__ import annotations

import tvm
from tvm import relax, te, tirx
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.attrs import OP_PATTERN_ATTR, OUT_ELEMWISE_FUSABLE
from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.types import cpu_op_with_static_shapes, cpu_tensor_target
from tvm_hetero.schedules.cpu.common import vector_lanes

CONV1D_OP = "relax.nn.conv1d"


@tvm.transform.module_pass(opt_level=0, name="Conv1dAsMatmul")
class Conv1dAsMatmul:
    """Compute each one-group NCW ``conv1d`` on a CPU vdevice as ``W' @ columns``.

    ``conv1d(x, w)`` with ``x (N, C, L)``, ``w (O, C, K)``, stride ``s``, dilation ``d`` and
    padding ``(p0, p1)`` becomes: ``x``'s ``K`` tap windows gathered on the channel axis into
    ``columns (N, K C, L')``, ``columns[n, k C + c, l] = x[n, c, l s + k d - p0]`` (zero
    outside ``x``; one kernel, :data:`COLUMNS_KERNEL`), and
    ``matmul(reshape(permute_dims(w, [0, 2, 1]), (O, K C)), columns)`` (where ``L'`` is no
    multiple of the matmul rule's widest panel, the columns are gathered for the next one that
    adds at most :data:`MOST_PADDED`, and the product is cropped to ``L'``), whose weight
    transform ``FoldConstant`` folds when ``w`` is a constant. The matrix product goes to the
    matmul rule, which runs it several times faster than the convolution rule runs the
    convolution: a 3-tap, stride-2 convolution of 512 channels over 1,600 samples took 73 ms
    as a convolution and 13.2 as columns and a product (ONNX Runtime 10.0; AMD EPYC, 2
    threads, ``benchmarks/cpu_kernels/convolutions_1d.py``). Numbers are equal up to the order
    of the sums.

    Notes
    -----
    The gather takes no producers into its kernel (``op_pattern`` 4, as
    :class:`~tvm_hetero.passes.SeparableResize`'s height pass): fused into it, an element-wise
    producer of ``x`` was computed once a tap. DAC's snake activations (``x + sin(a x)^2 / a``)
    before each 7-tap convolution were computed seven times an element: its columns kernels
    took 25 ms each beside a product of 18 ms, the model 1.8x ONNX Runtime's time (a gather of
    ``pad`` and ``K`` ``strided_slice`` calls and a ``concat``, the rule's first form).

    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before ``LegalizeOps``. Grouped convolutions (``GroupedConvolutionsByGroup``
    takes them: as columns and a batched product wav2vec 2.0's 128-tap positional convolution
    ran twice as long as TOPI's kernel, by group ten times faster than it), other layouts,
    symbolic shapes and GPU convolutions are left alone.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions rewritten (``mod`` when none is)."""
        return rewrite_calls(mod, _as_matmul)


def rewritten(call: relax.Call, mod: IRModule) -> bool:
    """Whether ``call`` is a convolution this pass rewrites."""
    layouts = ("NCW", "OIW", "NCW")
    return cpu_op_with_static_shapes(call, CONV1D_OP, layouts, mod) and int(call.attrs.groups) == 1


def _as_matmul(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not rewritten(call, rewriter.mod_):
        return None
    a, emit = call.attrs, rewriter.builder_.emit
    x, w = call.args
    out, channels, taps = (int(v) for v in w.ty.shape.values)
    length = int(call.ty.shape.values[2])
    stride, dilation = int(a.strides[0]), int(a.dilation[0])
    left = int(a.padding[0])
    wide = whole_panels(cpu_tensor_target(call.ty, rewriter.mod_), length)
    alone = {OP_PATTERN_ATTR: OUT_ELEMWISE_FUSABLE} if COLUMNS_ALONE else None
    columns = emit(rewriter.builder_.call_te(
        _columns, x, taps, stride, dilation, left, wide, primfunc_name_hint=COLUMNS_KERNEL,
        primfunc_attrs=alone,
    ))  # fmt: skip
    weights = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 1]), (out, taps * channels))
    y = relax.op.matmul(emit(weights), columns, out_dtype=a.out_dtype or None)
    return y if wide == length else relax.op.strided_slice(emit(y), [2], [0], [length])


MOST_PADDED = 1 / 8
"""The largest share of a convolution's output length its columns may add to reach whole
panels (:func:`whole_panels`)."""


def whole_panels(target: tvm.target.Target | None, length: int) -> int:
    """The positions the columns are gathered for: ``length``, or the next multiple of the
    matmul rule's widest panel (two vectors) where that is not one and adds at most
    :data:`MOST_PADDED` (the extra positions are computed and cropped). The rule takes panels
    of one vector where only that divides the columns, and rows of windows read in place
    twice as often: DAC's 256 -> 256, 7 taps over 2,000 samples took 25.3 ms, over 2,016 17.6
    (ONNX Runtime 11.2 both; Intel Xeon, two threads, the layer alone, interleaved)."""
    if target is None:
        return length
    wide = 2 * vector_lanes(target, 32)
    padded = -(-length // wide) * wide
    return padded if padded - length <= MOST_PADDED * length else length


COLUMNS_ALONE = True
"""Whether the gather takes no producers into its kernel (:class:`Conv1dAsMatmul`); off, TVM's
fusion computes an element-wise producer of ``x`` once a tap in it."""

COLUMNS_KERNEL = "tap_columns"
"""The name of the kernel that gathers a convolution's tap windows (:class:`Conv1dAsMatmul`)."""


def _columns(
    x: te.Tensor, taps: int, stride: int, dilation: int, left: int, length: int
) -> te.Tensor:
    """``columns[n, k C + c, l] = x[n, c, l stride + k dilation - left]``, zero outside ``x``
    (positions past the output's, :func:`whole_panels`, read what lies there or zero)."""
    batch, channels, width = (int(v) for v in x.shape)

    def window(n, row, j):
        k, c = row // channels, row % channels
        at = j * stride + k * dilation - left
        inside = tirx.all(at >= 0, at < width)
        clamped = tirx.max(tirx.min(at, width - 1), 0)
        return tirx.if_then_else(inside, x[n, c, clamped], tirx.const(0, x.dtype))

    return te.compute((batch, taps * channels, length), window, name="columns")
