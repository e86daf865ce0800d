"""Conv1dAsMatmul: CPU 1-D convolutions as a gather of their windows and one matrix product."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.types import cpu_op_with_static_shapes

CONV1D_OP = "relax.nn.conv1d"


@tvm.transform.module_pass(opt_level=0, name="Conv1dAsMatmul")
class Conv1dAsMatmul:
    """Compute each one-group NCW ``conv1d`` on a CPU vdevice as ``W' @ columns``.

    ``conv1d(x, w)`` with ``x (N, C, L)``, ``w (O, C, K)``, stride ``s``, dilation ``d`` and
    padding ``(p0, p1)`` becomes: ``x`` padded, its ``K`` tap windows
    ``strided_slice(x, axes=[2], begin=[k d], end=[k d + s (L' - 1) + 1], strides=[s])``
    concatenated on the channel axis into ``columns (N, K C, L')``, and
    ``matmul(reshape(permute_dims(w, [0, 2, 1]), (O, K C)), columns)``, whose weight
    transform ``FoldConstant`` folds when ``w`` is a constant. The matrix product goes to the
    matmul rule, which runs it several times faster than the convolution rule runs the
    convolution: a 3-tap, stride-2 convolution of 512 channels over 1,600 samples took 73 ms
    as a convolution and 13.2 as columns and a product (ONNX Runtime 10.0; AMD EPYC, 2
    threads, ``benchmarks/cpu_kernels/convolutions_1d.py``). Numbers are equal up to the order
    of the sums.

    Notes
    -----
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
    left, right = (int(p) for p in a.padding)
    if left or right:
        x = emit(relax.op.nn.pad(x, [0, 0, 0, 0, left, right]))
    span = stride * (length - 1) + 1
    windows = [
        emit(relax.op.strided_slice(x, [2], [k * dilation], [k * dilation + span], [stride]))
        for k in range(taps)
    ]
    columns = emit(relax.op.concat(windows, axis=1)) if taps > 1 else windows[0]
    weights = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 1]), (out, taps * channels))
    return relax.op.matmul(emit(weights), columns, out_dtype=a.out_dtype or None)
