"""Conv1dAsMatmul: CPU 1-D convolutions as a gather of their windows and one matrix product."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero.ir.mutate import mutate_functions
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
    A grouped convolution (``G`` groups of ``Cg > 1`` channels) gets its columns per group,
    ``(N, G, K Cg, L')``, and one batched product with the weights as ``(G, O / G, K Cg)``:
    wav2vec 2.0's positional convolution (768 channels in 16 groups, 128 taps) is one.

    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before ``LegalizeOps``. Depthwise convolutions, other layouts, symbolic
    shapes and GPU convolutions are left alone.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions rewritten (``mod`` when none is)."""
        return mutate_functions(mod, _AsMatmul(mod))


def rewritten(call: relax.Call, mod: IRModule) -> bool:
    """Whether ``call`` is a convolution this pass rewrites: one group, or groups of more than
    one channel (a depthwise convolution, one channel a group, stays the convolution rule's)."""
    layouts = ("NCW", "OIW", "NCW")
    if not cpu_op_with_static_shapes(call, CONV1D_OP, layouts, mod):
        return False
    return int(call.attrs.groups) == 1 or int(call.args[1].ty.shape.values[1]) > 1


@mutator
class _AsMatmul(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.mod_ = mod

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not rewritten(call, self.mod_):
            return call
        a, emit = call.attrs, self.builder_.emit
        x, w = call.args
        out, channels, taps = (int(v) for v in w.ty.shape.values)
        batch, _, length = (int(v) for v in call.ty.shape.values)
        groups = int(a.groups)
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
        if groups == 1:
            weights = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 1]), (out, taps * channels))
            return relax.op.matmul(emit(weights), columns, out_dtype=a.out_dtype or None)
        # columns (N, K G Cg, L') -> (N, G, K Cg, L'); weights (G O/G, Cg, K) -> (G, O/G, K Cg)
        by_tap = relax.op.reshape(columns, (batch, taps, groups, channels, length))
        grouped = relax.op.permute_dims(by_tap, [0, 2, 1, 3, 4])
        columns = emit(relax.op.reshape(grouped, (batch, groups, taps * channels, length)))
        per_group = relax.op.reshape(w, (groups, out // groups, channels, taps))
        weights = relax.op.reshape(
            relax.op.permute_dims(per_group, [0, 1, 3, 2]), (groups, out // groups, taps * channels)
        )
        product = emit(relax.op.matmul(emit(weights), columns, out_dtype=a.out_dtype or None))
        return relax.op.reshape(product, (batch, out, length))
