"""MergeParallelConvolutions: a sum of convolutions of one input, and of a per-channel scale of
it, as one convolution with the summed weights."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero.ir.batch_norm import scale_and_shift
from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import mutate_functions
from tvm_hetero.ir.types import static_shape

CONV2D_OP, ADD_OP, BATCH_NORM_OP, RESHAPE_OP = (
    "relax.nn.conv2d", "relax.add", "relax.nn.batch_norm", "relax.reshape",
)  # fmt: skip
LAYOUTS = ("NCHW", "OIHW", "NCHW")


@tvm.transform.module_pass(opt_level=0, name="MergeParallelConvolutions")
class MergeParallelConvolutions:
    """Compute a sum of branches that read one tensor ``x`` - convolutions of ``x`` with
    constant weights (and constant per-channel biases), and a batch normalization of ``x`` in
    inference (a per-channel scale and shift) - as one convolution of ``x`` with the sum of
    the branches' weights, smaller windows zero-padded about their centres, and one bias.

    RepVGG and MobileOne train such blocks (a 3x3, a 1x1 and an identity branch; MobileOne
    four 3x3 depthwise ones besides) and export them unmerged: every branch was a kernel that
    read ``x`` and an add that read its output, where the sum is one convolution of the same
    size as the largest branch (their papers' own re-parameterization, done here at compile
    time; ONNX Runtime runs the branches).

    Notes
    -----
    Run after ``RealizeVDevice``: every branch and the sum on one vdevice (a plan that put
    branches apart keeps them). Branches: ``conv2d`` in NCHW / OIHW with the same strides,
    groups, output type and dilation 1, windows whose centres fall on the same input positions
    (a 3x3 with padding 1 and a 1x1 with padding 0); a batch normalization (``axis`` 1, not
    training) counts as a 1x1 convolution whose weights are its scale on the diagonal, so it
    needs stride 1 and as many output channels as input channels. The adds between branches
    and the branches' outputs must have no other use (they are computed anyway otherwise). The
    numbers are the same sums in another order: equal to rounding.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with each such sum merged (``mod`` when none is)."""
        return mutate_functions(mod, _Merger(mod))


@dataclass(frozen=True)
class _Branch:
    """One branch as a convolution: its weights, padding (top, left, bottom, right) and its bias
    (or None)."""

    weights: np.ndarray
    padding: tuple[int, int, int, int]
    bias: np.ndarray | None


@mutator
class _Merger(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)
        self.merged: dict[relax.Call, tuple[relax.Expr, np.ndarray | None]] = {}

    def visit_function_(self, func: relax.Function) -> relax.Expr:  # pylint: disable=arguments-renamed
        self.merged = _sums(func)
        if not self.merged:
            return func
        return relax.analysis.remove_all_unused(super().visit_function_(func))

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        found = self.merged.get(call)
        if found is None:
            return super().visit_call_(call)
        conv, bias = found
        conv = self.visit_expr(conv)  # the input as this rewrite names it
        if bias is None:
            return conv
        return relax.op.add(self.builder_.emit(conv), relax.const(bias))


def _sums(func: relax.Function) -> dict[relax.Call, tuple]:
    """``{a sum's last add: (the convolution replacing it, its bias or None)}`` for ``func``."""
    values = relax.analysis.get_var2val(func)
    uses: dict[relax.Var, int] = {}

    def count(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Var):
            uses[expr] = uses.get(expr, 0) + 1

    relax.analysis.post_order_visit(func.body, count)
    found: dict[relax.Var, tuple[relax.Call, tuple, set]] = {}
    for var, value in values.items():
        if not calls_op(value, ADD_OP):
            continue
        inner: set[relax.Var] = set()
        terms = _terms(value, values, uses, inner)
        if terms is None or len(terms) < 2:
            continue
        merged = _merge(terms)
        if merged is not None:
            found[var] = (value, merged, inner)
    absorbed = set().union(*(inner for *_, inner in found.values())) if found else set()
    return {add: merged for var, (add, merged, _) in found.items() if var not in absorbed}


def _terms(value: relax.Expr, values: dict, uses: dict, inner: set) -> list | None:
    """The branches an add sums (each ``(call, bias or None)``), looking through adds whose
    result only this sum reads; ``inner`` collects the variables looked through."""
    if calls_op(value, ADD_OP):
        a, b = value.args
        for conv, bias in ((a, b), (b, a)):
            constant = _constant(bias, values)
            if calls_op(values.get(conv), CONV2D_OP) and constant is not None:
                if uses.get(conv, 0) != 1:
                    return None
                inner.add(conv)
                return [(values[conv], constant)]
        out = []
        for operand in (a, b):
            if not isinstance(operand, relax.Var) or operand not in values:
                return None
            if uses.get(operand, 0) != 1:
                return None
            inner.add(operand)
            more = _terms(values[operand], values, uses, inner)
            if more is None:
                return None
            out += more
        return out
    if calls_op(value, CONV2D_OP):
        return [(value, None)]
    if isinstance(value, relax.TupleGetItem) and value.index == 0:
        norm = value.tuple_value
        norm = values.get(norm, norm) if isinstance(norm, relax.Var) else norm
        if calls_op(norm, BATCH_NORM_OP):
            return [(norm, None)]
    return None


def _merge(terms: list) -> tuple[relax.Expr, np.ndarray | None] | None:
    """``(conv2d(x, sum of the weights), the summed bias or None)`` for the branches, or None
    where they do not merge."""
    convs = [call for call, _ in terms if calls_op(call, CONV2D_OP)]
    if not convs:
        return None
    first = convs[0]
    x = first.args[0]
    if any(not call.args[0].same_as(x) for call, _ in terms):
        return None
    a = first.attrs
    out_ty = first.ty
    shape, out_shape = static_shape(x.ty), static_shape(out_ty)
    if shape is None or out_shape is None:
        return None  # a symbolic batch: the window sizes and padding are fixed, the maps not
    strides = [int(s) for s in a.strides]
    groups = int(a.groups)
    branches = []
    for call, bias in terms:
        branch = (
            _conv_branch(call, bias, strides, groups, out_ty)
            if calls_op(call, CONV2D_OP)
            else _norm_branch(call, strides, groups, shape, out_shape, out_ty.vdevice)
        )
        if branch is None:
            return None
        branches.append(branch)
    top, left = (max(b.padding[axis] for b in branches) for axis in (0, 1))
    size = [max(b.weights.shape[2 + axis] + (top, left)[axis] - b.padding[axis] for b in branches)
            for axis in (0, 1)]  # fmt: skip
    weights = np.zeros((*branches[0].weights.shape[:2], *size), "float64")
    for b in branches:
        dy, dx = top - b.padding[0], left - b.padding[1]
        kh, kw = b.weights.shape[2:]
        weights[:, :, dy : dy + kh, dx : dx + kw] += b.weights
    pads = []
    for axis, pad in enumerate((top, left)):
        extent, out, window = shape[2 + axis], out_shape[2 + axis], size[axis]
        # the branches' own padding after the map where it serves (a 3x3 / 2 keeps [1, 1, 1, 1]
        # beside a 1x1 / 2: the convolution rule's tiles take even padding), else the least
        kept = max(
            b.padding[2 + axis] + window - b.weights.shape[2 + axis] - (pad - b.padding[axis])
            for b in branches
        )
        needed = max(0, (out - 1) * strides[axis] + window - extent - pad)
        fits = [
            p for p in (kept, needed) if (extent + pad + p - window) // strides[axis] + 1 == out
        ]
        if not fits:
            return None
        pads.append(fits[0])
    dtype = str(out_ty.dtype)
    conv = relax.op.nn.conv2d(
        x, relax.const(weights.astype(dtype)), strides, [top, left, *pads],
        [1, 1], groups, *LAYOUTS, a.out_dtype or None,
    )  # fmt: skip
    biases = [b.bias for b in branches if b.bias is not None]
    if not biases:
        return conv, None
    return conv, np.sum(biases, axis=0).astype(dtype).reshape(1, -1, 1, 1)


def _conv_branch(call, bias, strides, groups, out_ty) -> _Branch | None:
    a = call.attrs
    weights = _constant(call.args[1], {})
    if weights is None or (a.data_layout, a.kernel_layout, a.out_layout) != LAYOUTS:
        return None
    if [int(s) for s in a.strides] != strides or int(a.groups) != groups:
        return None
    if any(int(d) != 1 for d in a.dilation) or not _same_type(call.ty, out_ty):
        return None
    if bias is not None:
        bias = _channel_vector(bias, weights.shape[0])
        if bias is None:
            return None
    return _Branch(weights.astype("float64"), tuple(int(p) for p in a.padding), bias)


def _norm_branch(call, strides, groups, shape, out_shape, vdevice) -> _Branch | None:
    a = call.attrs
    params = [_constant(arg, {}) for arg in call.args[1:]]
    if int(a.axis) != 1 or bool(a.training) or any(p is None for p in params):
        return None
    if strides != [1, 1] or shape[2:] != out_shape[2:] or shape[1] != out_shape[1]:
        return None
    if call.ty.fields[0].vdevice != vdevice:
        return None
    channels = shape[1]
    scale, shift = scale_and_shift(a, params)
    per_group = channels // groups
    weights = np.zeros((channels, per_group, 1, 1))
    weights[np.arange(channels), np.arange(channels) % per_group, 0, 0] = scale
    return _Branch(weights, (0, 0, 0, 0), shift)


def _same_type(a, b) -> bool:
    return (
        str(a.dtype) == str(b.dtype)
        and a.vdevice == b.vdevice
        and (static_shape(a) == static_shape(b))
    )


def _channel_vector(value: np.ndarray, channels: int) -> np.ndarray | None:
    """A bias broadcast over channels (``(1, C, 1, 1)``, ``(C, 1, 1)``) as ``(C,)``."""
    if value.size != channels or value.ndim < 3 or value.shape[-3] != channels:
        return None
    return value.astype("float64").reshape(-1)


def _constant(expr: relax.Expr, values: dict) -> np.ndarray | None:
    """The value of ``expr`` where it is a constant, or a reshape of one, bound or not."""
    if isinstance(expr, relax.Var):
        expr = values.get(expr)
    if isinstance(expr, Constant):
        return expr.value.numpy()
    if calls_op(expr, RESHAPE_OP) and isinstance(expr.args[0], Constant):
        return expr.args[0].value.numpy().reshape([int(d) for d in expr.ty.shape.values])
    return None
