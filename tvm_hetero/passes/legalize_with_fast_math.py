"""LegalizeWithFastMath: TVM's LegalizeOps, with vectorizable exp, tanh, erf and small powers,
folded batch norms and separable max pools on CPUs."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te, topi
from tvm.ir import IRModule

from tvm_hetero.ir import fast_math
from tvm_hetero.ir.attrs import OP_PATTERN_ATTR, OPAQUE, SEPARABLE_POOL_ATTR
from tvm_hetero.ir.batch_norm import scale_and_shift
from tvm_hetero.ir.types import cpu_tensor_target

FLOAT32 = "float32"


def _sigmoid(x: te.Tensor) -> te.Tensor:
    return topi.divide(1.0, topi.add(1.0, topi.fast_exp(topi.negative(x))))


def fast_erf(x: te.Tensor) -> te.Tensor:
    """``topi.fast_erf`` squaring no tiny argument (:func:`~tvm_hetero.ir.fast_math.fast_erf`:
    the same floats out). The polynomials in the square of a tiny argument (a GELU's input
    where a network's activations have faded, as through many layers of random weights, or
    over silence) made subnormal products, each a microcode assist on x86: PP-OCRv6's tiny
    recognizer, a model no one here had run, spent 29.5 ms in a 1x1 convolution with GELU that
    takes 6 ms on normal inputs (``benchmarks/models/kernels_inside.py``), and ONNX Runtime's
    GELU four times its usual time on the same values."""
    return _elementwise(x, fast_math.fast_erf, topi.fast_erf, "T_fast_erf")


def fast_tanh(x: te.Tensor) -> te.Tensor:
    """``topi.fast_tanh`` squaring no tiny argument (:func:`~tvm_hetero.ir.fast_math.
    fast_tanh`), as :func:`fast_erf`."""
    return _elementwise(x, fast_math.fast_tanh, topi.fast_tanh, "T_fast_tanh")


def _elementwise(x: te.Tensor, expr: Callable, topis: Callable, name: str) -> te.Tensor:
    if not fast_math.FLUSH_TINY_SQUARES or x.dtype != FLOAT32:
        return topis(x)
    return te.compute(x.shape, lambda *index: expr(x(*index)), name=name, tag="elemwise")


def _gelu(x: te.Tensor) -> te.Tensor:
    half = topi.multiply(x, 0.5)
    return topi.multiply(half, topi.add(1.0, fast_erf(topi.multiply(x, 1 / math.sqrt(2)))))


def _gelu_tanh(x: te.Tensor) -> te.Tensor:
    cube = topi.multiply(topi.multiply(topi.multiply(x, x), x), 0.044715)
    inner = topi.multiply(topi.add(x, cube), math.sqrt(2 / math.pi))
    return topi.multiply(topi.multiply(x, 0.5), topi.add(1.0, fast_tanh(inner)))


FAST: dict[str, Callable[..., te.Tensor]] = {
    "relax.exp": topi.fast_exp,
    "relax.tanh": fast_tanh,
    "relax.erf": fast_erf,
    "relax.sigmoid": _sigmoid,
    "relax.nn.silu": lambda x: topi.multiply(x, _sigmoid(x)),
    "relax.nn.gelu": _gelu,
    "relax.nn.gelu_tanh": _gelu_tanh,
}
"""Operators whose CPU kernels get TVM's fast forms (``softmax`` too, below)."""


@tvm.transform.module_pass(opt_level=0, name="LegalizeWithFastMath")
class LegalizeWithFastMath:
    """``relax.transform.LegalizeOps``, except that float32 ``exp``, ``tanh``, ``erf``,
    ``sigmoid``, ``silu``, ``gelu``, ``gelu_tanh`` and ``softmax`` on a CPU become kernels of
    ``topi.fast_exp`` / ``fast_tanh`` / ``fast_erf`` / ``nn.fast_softmax``.

    LLVM has no vector ``exp`` on x86 without a vector math library: ``llvm.exp.v8f32`` is eight
    calls of the C library's ``expf``, so EfficientNet's swish activations took a fifth of its
    time, and every softmax, GELU and recurrent gate paid the same. The fast forms are plain
    arithmetic that vectorizes, within about 1e-6 relative of the exact functions
    (``tests/passes/test_legalize_with_fast_math.py`` measures them on a dense grid), which is
    what ONNX Runtime's kernels do too. ``power`` by a constant integer exponent of 2 to 4
    (:data:`SMALL_POWERS`) is a product of its base (``_power``), an inference
    ``batch_norm`` of constant statistics one multiply-add (``_batch_norm``), and a max pool
    with a window of 3 or more over wide rows its rows' maxima, then its columns'
    (``_separable_max_pool``).

    Notes
    -----
    In place of ``LegalizeOps``, after ``RealizeVDevice`` (an operator's output vdevice names its
    target; none: the home vdevice's). GPU operators legalize as TVM does.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """The legalized module."""
        custom = {name: _on_cpu(mod, _fast_call(name, fn)) for name, fn in FAST.items()}
        custom["relax.nn.softmax"] = _on_cpu(mod, _fast_softmax)
        custom["relax.power"] = _on_cpu(mod, _power)
        custom["relax.nn.batch_norm"] = _on_cpu(mod, _batch_norm, operand=0)
        custom["relax.nn.max_pool2d"] = _on_cpu(mod, _separable_max_pool)
        return relax.transform.LegalizeOps(customize_legalize_map=custom)(mod)


def _fast_call(op: str, fn: Callable[..., te.Tensor]) -> Callable:
    name = op.rsplit(".", 1)[1]  # kernels named as TVM names them: sigmoid, fused_..._gelu
    return lambda bb, call: bb.call_te(fn, call.args[0], primfunc_name_hint=name)


SMALL_POWERS = range(2, 5)
"""Constant integer exponents ``power`` computes as products of its base."""


def _power(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``x ** n`` for a constant scalar ``n`` in :data:`SMALL_POWERS` as ``x * x * ...``: TVM
    calls the C library's ``powf`` once per element (LLVM turns ``pow(x, 2.0)`` into a
    product itself, not ``pow(x, 3.0)``), and GPT-2's GELU, ``x + 0.044715 * x ** 3``, took
    ten times ONNX Runtime's whole GELU. Other exponents keep TVM's legalization."""
    x, exponent = call.args
    n = _scalar(exponent)
    if n is None or n not in SMALL_POWERS or not _same_shape(call.ty, x.ty):
        return tvm_legalized(bb, call)

    def product(t: te.Tensor) -> te.Tensor:
        out = t
        for _ in range(int(n) - 1):
            out = topi.multiply(out, t)
        return out

    return bb.call_te(product, x, primfunc_name_hint="power")


def _batch_norm(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """An inference ``batch_norm`` whose scale, shift and statistics are constants as
    ``x * a[c] + b[c]`` with ``a`` and ``b`` folded at compile time; TVM's kernel computed
    ``(x - mean) / sqrt(var + eps) * gamma + beta`` for every element (DenseNet's 58
    normalizations after its concatenations, LeViT's). Like TVM's, the kernel also returns
    the moving statistics (copies of its constants): a tuple of the kernel's, so fusion sees
    what it saw before. Anything else: TVM's legalization."""
    x, gamma, beta, mean, var = call.args
    attrs = call.attrs
    stats = [_array(e) for e in (gamma, beta, mean, var)]
    if bool(attrs.training) or any(a is None for a in stats):
        return tvm_legalized(bb, call)
    a, b = scale_and_shift(attrs, stats)
    axis = int(attrs.axis) % len(x.ty.shape)

    def affine(t, a_, b_, mean_t, var_t) -> list[te.Tensor]:
        out = te.compute(t.shape, lambda *i: t(*i) * a_[i[axis]] + b_[i[axis]], name="batch_norm")
        return [out, topi.identity(mean_t), topi.identity(var_t)]

    constants = [relax.const(a.astype(FLOAT32)), relax.const(b.astype(FLOAT32))]
    return bb.call_te(affine, x, *constants, mean, var, primfunc_name_hint="batch_norm")


SEPARABLE_POOL_MIN_WIDTH = 20
"""Output columns from which a max pool is legalized as two passes (:func:`separable_max_pool`).
Each pool alone, Zen 4, two threads, interleaved with TVM's kernel under the pool rule and
ONNX Runtime (``benchmarks/cpu_kernels/max_pools.py``): 3 x 3 windows with outputs 28-112
wide ran as fast or 1.2-3x faster (ResNet's 64 x 112 x 112 with stride 2: 173 -> 58 us, ONNX
Runtime 129), outputs 6-14 wide 1.2-2.5x slower (rows too short for the loop vectorizer to
pay). On an Intel Xeon (family 6 model 167), 27 columns ran faster in two passes too
(SqueezeNet 1.1's 128 x 55 x 55: 0.112 -> 0.029 ms, ONNX Runtime 0.149, ``max_pools.py``)
and 17 slower (Inception v3's 288 x 35 x 35, in a first run: 0.037 -> 0.068): the bound sits
between them. 2 x 2 windows, whose maximum is as many comparisons either way, went from 1.5x
faster (VGG's 64 x 224 x 224) to 5x slower (256 x 56 x 56): they keep TVM's kernel, as do
windows narrower than 3 either way."""


def _separable_max_pool(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """A 2-D max pool (NCHW, static shapes, no dilation, floor mode, a window of at least 3 x 3,
    at least :data:`SEPARABLE_POOL_MIN_WIDTH` output columns) as the maximum along each
    input row's windows, then down the columns of those maxima: a 3 x 3 window is 3 + 3
    comparisons an output, not 9, and the row pass reads its row once where TVM's kernel
    gathered every lane of a strided window from a padded copy of the input (ResNet's 3 x 3
    pool with stride 2 took 1.6x ONNX Runtime's time alone, more inside the model). The
    kernel carries :data:`~tvm_hetero.ir.attrs.SEPARABLE_POOL_ATTR` for its CPU rule and is
    fused with nothing. Anything else: TVM's legalization."""
    a, x = call.attrs, call.args[0]
    shape = x.ty.shape
    static = shape is not None and all(isinstance(d, tvm.tirx.IntImm) for d in shape.values)
    plain = (a.layout, a.out_layout) == ("NCHW", "NCHW") and not bool(a.ceil_mode)
    out = [int(d) for d in call.ty.shape.values] if static else []
    wide = static and out[3] >= SEPARABLE_POOL_MIN_WIDTH
    window = [int(v) for v in a.pool_size]
    if not (wide and plain and min(window) >= 3 and all(int(d) == 1 for d in a.dilation)):
        return tvm_legalized(bb, call)
    strides = [int(v) for v in a.strides]
    top, left, _, _ = (int(v) for v in a.padding)
    attrs = {SEPARABLE_POOL_ATTR: True, OP_PATTERN_ATTR: OPAQUE}
    return bb.call_te(
        separable_max_pool, x, window, strides, (top, left), out,
        primfunc_name_hint="max_pool2d", primfunc_attrs=attrs,
    )  # fmt: skip


def separable_max_pool(
    x: te.Tensor, window: list[int], strides: list[int], before: tuple[int, int], out: list[int]
) -> te.Tensor:  # fmt: skip
    """``out``-shaped max pool of ``x`` (NCHW) by ``window`` and ``strides``, ``before`` rows
    and columns of padding first, as two stages: ``pool_rows`` (every input row, each output
    column's window) and ``pool_columns`` (each output row's window of those)."""
    n, c, height, width = (int(d) for d in x.shape)
    lowest = tvm.tirx.min_value(x.dtype)

    def window_max(read, start, size: int, extent: int):
        terms = []
        for k in range(size):
            at = start + k
            terms.append(
                tvm.tirx.if_then_else(tvm.tirx.all(at >= 0, at < extent), read(at), lowest)
            )
        result = terms[0]
        for term in terms[1:]:
            result = tvm.tirx.max(result, term)
        return result

    rows = te.compute(
        (n, c, height, out[3]),
        lambda b, ch, y, col: window_max(
            lambda at: x[b, ch, y, at], col * strides[1] - before[1], window[1], width
        ),
        name="pool_rows",
    )
    return te.compute(
        out,
        lambda b, ch, row, col: window_max(
            lambda at: rows[b, ch, at, col], row * strides[0] - before[0], window[0], height
        ),
        name="pool_columns",
    )


def _array(expr: relax.Expr) -> np.ndarray | None:
    """A constant's values, else ``None``."""
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) else None


def _scalar(expr: relax.Expr) -> float | None:
    """The value of a constant of one element, else ``None``."""
    value = _array(expr)
    return None if value is None or value.size != 1 else float(value.reshape(()))


def _same_shape(a, b) -> bool:
    """Whether two tensor types have the same static shape (the exponent broadcasts to none)."""
    return bool(
        getattr(a, "shape", None) is not None
        and getattr(b, "shape", None) is not None
        and tvm_ffi.structural_equal(a.shape, b.shape)
    )


def _fast_softmax(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    axis = int(call.attrs.axis)
    return bb.call_te(topi.nn.fast_softmax, call.args[0], axis, primfunc_name_hint="softmax")


def tvm_legalized(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    """``call`` legalized as TVM's ``LegalizeOps`` does: its operator's registered
    ``FLegalize``."""
    return call.op.get_attr("FLegalize")(bb, call)


def _on_cpu(mod: IRModule, fast: Callable, operand: int | None = None) -> Callable:
    """``fast`` for float32 operators on a CPU; TVM's own legalization for the rest. The
    output's type decides, or argument ``operand``'s (an operator returning a tuple)."""

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        ty = call.ty if operand is None else call.args[operand].ty
        if cpu_tensor_target(ty, mod) is not None and str(ty.dtype) == FLOAT32:
            return fast(bb, call)
        return tvm_legalized(bb, call)

    return legalize
