"""GridSampleTaps: CPU bilinear grid samples as each grid point's four taps, computed once for
every channel, then a weighted gather."""

from __future__ import annotations

import tvm
from tvm import relax, te, tirx
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.attrs import OP_PATTERN_ATTR, OUT_ELEMWISE_FUSABLE
from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.split_dims import shape_of
from tvm_hetero.ir.types import cpu_tensor_target

GRID_SAMPLE_OP = "relax.image.grid_sample"
PADDING_MODES = ("zeros", "border")
"""Padding modes whose taps this pass computes (TOPI's reflection is left to TVM's kernel; an
empty tuple switches the pass off, for benchmarks)."""
TAPS = 4
TAPS_KERNEL, GATHER_KERNEL = "grid_sample_taps", "grid_sample_gather"


@tvm.transform.module_pass(opt_level=0, name="GridSampleTaps")
class GridSampleTaps:
    """Compute each bilinear NCHW ``image.grid_sample`` on a CPU vdevice as two kernels: one
    computes, for every grid point, the flat index and the weight of each of its four taps
    (zero, at index 0, for a tap outside the image in ``zeros`` mode); the next sums each
    channel's four pixels at those indices, weighted.

    TVM's kernel computes a grid point's source position, its floors, bounds and weights again
    for every channel, with a branch for each tap's bounds: deformable attention samples every
    head's 32 channels at the same points (transformers' Deformable DETR: 48 samples of 8 heads
    x 300 queries x 4 points took 1.1-1.7 ms each on two threads, 51 ms of a 105-150 ms run,
    ONNX Runtime's 15 ms in all). Here a point's taps are computed once and each channel's
    output is four loads and four multiply-adds.

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before ``LegalizeOps``. Only ``bilinear`` samples of a static NCHW float
    input, in :data:`PADDING_MODES`, with either ``align_corners``; nearest and bicubic
    samples, reflection padding and GPU samples are left to TVM's kernel. The weights are
    TOPI's, multiplied before the pixel rather than after it (``v (a b)`` where TOPI computes
    ``(v a) b``: a rounding apart), and a tap outside the image reads pixel 0 at weight 0 where
    TOPI reads no pixel (an infinite pixel 0 would give NaN here). The gather carries
    ``op_pattern`` 4 so that ``FuseOps`` keeps the taps out of it (inlined, they would be
    computed for every channel again) and still fuses element-wise consumers in.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the grid samples rewritten (``mod`` when none is)."""
        return rewrite_calls(mod, _by_taps)


def rewritten(call: relax.Call, mod: IRModule) -> bool:
    """Whether ``call`` is a grid sample this pass computes by taps."""
    if not calls_op(call, GRID_SAMPLE_OP):
        return False
    a = call.attrs
    if (a.method, a.layout) != ("bilinear", "NCHW") or a.padding_mode not in PADDING_MODES:
        return False
    shapes = [shape_of(call.args[0]), shape_of(call.args[1]), shape_of(call)]
    dtype = str(call.args[0].ty.dtype)
    if None in shapes or not dtype.startswith("float") or str(call.ty.dtype) != dtype:
        return False
    return cpu_tensor_target(call.ty, mod) is not None


def grid_taps(
    grid: te.Tensor, height: int, width: int, align_corners: bool, border: bool
) -> list[te.Tensor]:
    """``[indices, weights]``, each ``[N, 4, H', W']``: for every point of ``grid``
    (``[N, 2, H', W']``, x then y in [-1, 1]) its four taps' flat indices into an image of
    ``height x width`` and their bilinear weights, TOPI's: top-left, top-right, bottom-left,
    bottom-right; a tap outside the image has index 0 and weight 0."""
    dtype = grid.dtype

    def source(n, h, w):  # TOPI's _unnormalize, then its border clip
        y, x = grid[n, 1, h, w], grid[n, 0, h, w]
        if align_corners:
            y, x = (y + 1) * (height - 1) / 2, (x + 1) * (width - 1) / 2
        else:
            y, x = -0.5 + (y + 1) * height / 2, -0.5 + (x + 1) * width / 2
        if border:
            y = te.min(te.max(y, 0), height - 1)
            x = te.min(te.max(x, 0), width - 1)
        return y, x

    def tap(n, k, h, w):
        y, x = source(n, h, w)
        y0, x0 = te.floor(y).astype("int32"), te.floor(x).astype("int32")
        dy, dx = y - y0, x - x0
        row, col = y0 + k // 2, x0 + k % 2
        along_y = tirx.Select(k // 2 == 1, dy, 1.0 - dy)
        along_x = tirx.Select(k % 2 == 1, dx, 1.0 - dx)
        inside = te.all(row >= 0, col >= 0, row < height, col < width)
        index = tirx.Select(inside, row * width + col, tirx.const(0, "int32"))
        weight = tirx.Select(inside, along_y * along_x, tirx.const(0.0, dtype))
        return index, weight

    n, _, out_height, out_width = grid.shape
    shape = (n, TAPS, out_height, out_width)
    indices = te.compute(shape, lambda *i: tap(*i)[0], name="tap_indices")
    weights = te.compute(shape, lambda *i: tap(*i)[1], name="tap_weights")
    return [indices, weights]


def _gathered(flat: te.Tensor, indices: te.Tensor, weights: te.Tensor) -> te.Tensor:
    """``out[n, c, h, w]``: the sum over the four taps of weight times ``flat[n, c, index]``
    (``flat``: the image, ``[N, C, height x width]``), in TOPI's order."""
    n, channels = flat.shape[:2]
    _, _, out_height, out_width = indices.shape

    def pixel(b, c, h, w):
        terms = [weights[b, k, h, w] * flat[b, c, indices[b, k, h, w]] for k in range(TAPS)]
        return ((terms[0] + terms[1]) + terms[2]) + terms[3]

    return te.compute((n, channels, out_height, out_width), pixel, name=GATHER_KERNEL)


def _by_taps(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not rewritten(call, rewriter.mod_):
        return None
    n, channels, height, width = shape_of(call.args[0])
    bb, a = rewriter.builder_, call.attrs
    border = a.padding_mode == "border"
    taps = bb.emit(
        bb.call_te(
            grid_taps, call.args[1], height, width, bool(a.align_corners), border,
            primfunc_name_hint=TAPS_KERNEL,
        )
    )  # fmt: skip
    flat = bb.emit(relax.op.reshape(call.args[0], (n, channels, height * width)))
    return bb.call_te(
        _gathered, flat, relax.TupleGetItem(taps, 0), relax.TupleGetItem(taps, 1),
        primfunc_name_hint=GATHER_KERNEL, primfunc_attrs={OP_PATTERN_ATTR: OUT_ELEMWISE_FUSABLE},
    )  # fmt: skip
