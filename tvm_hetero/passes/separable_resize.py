"""SeparableResize: CPU bilinear resizes as one interpolation along the width, then one along
the height."""

from __future__ import annotations

import tvm
from tvm import relax, te, tirx, topi
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.attrs import OP_PATTERN_ATTR, OUT_ELEMWISE_FUSABLE
from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.split_dims import shape_of
from tvm_hetero.ir.types import cpu_tensor_target

RESIZE_OP = "relax.image.resize2d"
MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
"""Coordinate transformations whose source position depends on one output index alone."""
WIDTH_KERNEL, HEIGHT_KERNEL = "resize2d_width", "resize2d_height"


@tvm.transform.module_pass(opt_level=0, name="SeparableResize")
class SeparableResize:
    """Compute each bilinear NCHW ``image.resize2d`` on a CPU vdevice as two kernels: one
    interpolates every input row along the width, the next interpolates those rows along the
    height.

    TVM's kernel reads four pixels for each output element at indices it computes from both
    coordinates, so its vectorised loop gathers all four; segmentation heads upsample whole
    maps that way (LR-ASPP's last 64 x 64 -> 512 x 512 of 21 classes took 13-15 ms on one
    core, three times ONNX Runtime's whole resize). Separated, the width kernel gathers two
    pixels for each of ``H x W'`` elements and the height kernel reads two whole rows, in
    vectors, for each output row: 2.9 ms (AMD EPYC, one thread). Both kernels are TOPI's
    arithmetic (``get_inx``, its clamps and its ``lerp``, in its order: width first), so the
    numbers are TVM's own, bit for bit. An axis that keeps its size is not interpolated, and a
    resize to the input's own size is the input (SegFormer's decoder "resizes" its finest map,
    256 channels of 128 x 128, to 128 x 128: 17 ms of gathers).

    Notes
    -----
    Run after ``RealizeVDevice`` (the output's vdevice names the target; none: the home
    vdevice's) and before ``LegalizeOps``. Only ``linear`` resizes of a static NCHW float input
    to the same type with a coordinate transformation in :data:`MODES`, where separating does
    not gather more (the input is less than twice as tall as the output). Cubic, nearest, NHWC
    and GPU resizes are left to TVM's kernel. The height kernel carries ``op_pattern`` 4 so
    that ``FuseOps`` keeps the width kernel out of it (and still fuses element-wise consumers
    in).
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the resizes separated (``mod`` when none is)."""
        return rewrite_calls(mod, _separated)


def rewritten(call: relax.Call, mod: IRModule) -> bool:
    """Whether ``call`` is a resize this pass separates (or drops: one to the input's size)."""
    if not calls_op(call, RESIZE_OP):
        return False
    a = call.attrs
    if (a.method, a.layout) != ("linear", "NCHW") or a.coordinate_transformation_mode not in MODES:
        return False
    shapes = [shape_of(call.args[0]), shape_of(call)]
    dtype = str(call.args[0].ty.dtype)
    if None in shapes or not dtype.startswith("float") or str(call.ty.dtype) != dtype:
        return False  # TVM's legalization drops ``out_dtype``: its kernel writes the input's
    (_, _, height, width), (_, _, out_height, out_width) = shapes
    if out_width != width and height >= 2 * out_height:  # the width pass would gather more
        return False
    return cpu_tensor_target(call.ty, mod) is not None


def _taps(index: tirx.PrimExpr, size: tirx.PrimExpr, out_size: int, mode: str):
    """The two clamped source indices and the weight of the second, as TOPI computes them."""
    where = topi.image.resize.get_inx(index, size, tirx.IntImm("int64", out_size), mode)
    first = te.floor(where).astype("int32")
    clamp = lambda i: te.max(te.min(i, size - 1), 0)  # noqa: E731
    return clamp(first), clamp(first + 1), where - first


def _lerp(a: tirx.PrimExpr, b: tirx.PrimExpr, t: tirx.PrimExpr) -> tirx.PrimExpr:
    return topi.image.resize._lerp(a, b, t)  # pylint: disable=protected-access


def _along(x: te.Tensor, axis: int, out_size: int, mode: str, dtype: str, name: str) -> te.Tensor:
    """``x`` interpolated along ``axis`` (3: the width, 2: the height) to ``out_size``."""
    shape = list(x.shape)
    size, shape[axis] = shape[axis], out_size

    def interpolate(*index):
        lo, hi, t = _taps(index[axis], size, out_size, mode)
        at = lambda k: x[(*index[:axis], k, *index[axis + 1 :])].astype("float")  # noqa: E731
        return _lerp(at(lo), at(hi), t).astype(dtype)

    return te.compute(shape, interpolate, name=name)


def _separated(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not rewritten(call, rewriter.mod_):
        return None
    (_, _, height, width), (_, _, out_height, out_width) = shape_of(call.args[0]), shape_of(call)
    mode, dtype = call.attrs.coordinate_transformation_mode, str(call.ty.dtype)
    x = call.args[0]
    if (out_height, out_width) == (height, width):
        return x  # every weight of the second pixel is 0: the input, as it is
    if out_width != width:
        rows = dtype if out_height == height else "float32"  # TOPI interpolates in float32
        x = rewriter.builder_.call_te(
            _along, x, 3, out_width, mode, rows, WIDTH_KERNEL, primfunc_name_hint=WIDTH_KERNEL
        )
        if out_height == height:
            return x
        x = rewriter.builder_.emit(x)
    # takes element-wise consumers, no producers: the width pass is not fused back into the
    # height pass (the CPU rules would inline it there)
    return rewriter.builder_.call_te(
        _along, x, 2, out_height, mode, dtype, HEIGHT_KERNEL, primfunc_name_hint=HEIGHT_KERNEL,
        primfunc_attrs={OP_PATTERN_ATTR: OUT_ELEMWISE_FUSABLE},
    )  # fmt: skip
