"""SubsampleStridedPointwise: strided CPU 1x1 convolutions as a subsample and a 1x1 convolution
of stride 1 (the matmul rule's)."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.types import cpu_op_with_static_shapes

CONV2D_OP = "relax.nn.conv2d"


@tvm.transform.module_pass(opt_level=0, name="SubsampleStridedPointwise")
class SubsampleStridedPointwise:
    """Compute each 1x1 NCHW ``conv2d`` with a stride and no padding on a CPU vdevice as
    ``conv2d(strided_slice(x, axes=[2, 3], strides=s), w)`` with stride 1.

    A 1x1 convolution reads one input pixel per output pixel: with a stride it only skips
    pixels. As it was, the convolution rule took it, and a ResNet's downsampling shortcut
    (1024 -> 2048 channels, 14 x 14 -> 7 x 7) ran at twice ONNX Runtime's time; the subsample
    is a copy of a quarter of the input, and the 1x1 convolution of stride 1 is the matmul
    rule's, weights x image (``benchmarks/cpu_kernels/narrow_vectors.py``). The numbers are
    the same products in the same order.

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before ``PadConvolutionOutputs`` (which leaves stride-1 1x1 convolutions to
    the matmul rule). One group, no dilation, static shapes; the unfused build (one operator,
    one kernel) keeps the convolution.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the convolutions rewritten (``mod`` when none is)."""
        return rewrite_calls(mod, _subsampled)


def rewritten(call: relax.Call, mod: IRModule) -> bool:
    """Whether ``call`` is a convolution this pass rewrites."""
    if not cpu_op_with_static_shapes(call, CONV2D_OP, ("NCHW", "OIHW", "NCHW"), mod):
        return False
    a = call.attrs
    kernel = [int(k) for k in call.args[1].ty.shape.values[2:]]
    return (
        kernel == [1, 1]
        and int(a.groups) == 1
        and any(int(s) > 1 for s in a.strides)
        and all(int(p) == 0 for p in a.padding)
        and all(int(d) == 1 for d in a.dilation)
    )


def _subsampled(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not rewritten(call, rewriter.mod_):
        return None
    a = call.attrs
    x, w = call.args
    height, width = (int(d) for d in x.ty.shape.values[2:])
    strides = [int(s) for s in a.strides]
    pixels = rewriter.builder_.emit(
        relax.op.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[height, width], strides=strides)
    )
    return relax.op.nn.conv2d(pixels, w, 1, 0, 1, 1, "NCHW", "OIHW", "NCHW", a.out_dtype or None)
