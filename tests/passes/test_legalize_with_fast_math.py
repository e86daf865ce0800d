"""LegalizeWithFastMath: CPU exp, tanh, erf and their kin legalized to TVM's fast forms."""

from unittest.mock import patch

import numpy as np
import pytest
import tvm
from scipy.special import erf
from tvm import relax, topi

from tvm_hetero._compat import PrimFunc, VDevice, make_target
from tvm_hetero.ir import fast_math
from tvm_hetero.passes import LegalizeWithFastMath

CPU = {"kind": "llvm"}
CUDA = {"kind": "cuda", "arch": "sm_80"}
GRID = np.linspace(-30, 30, 1 << 16).astype("float32")


def _module(op, shape=GRID.shape, device=CPU):
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(op(x))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def _run(mod, x):
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _kernel_text(mod):
    return "\n".join(f.script() for _, f in mod.functions_items() if isinstance(f, PrimFunc))


EXACT = {
    "exp": (relax.op.exp, np.exp),
    "tanh": (relax.op.tanh, np.tanh),
    "erf": (relax.op.erf, erf),
    "sigmoid": (relax.op.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "silu": (relax.op.nn.silu, lambda x: x / (1 + np.exp(-x))),
    "gelu": (relax.op.nn.gelu, lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_fast_forms_are_within_2e_6_of_the_exact_functions(name):
    """On a dense grid over [-30, 30] (exp up to e^30), against float64: the error relative
    where the value is over 1e-3 and absolute below (sigmoid's far tail); GELU's over
    ``max(|x|, 1)`` (``0.5 x (1 + erf)`` cancels where erf nears -1, in any float32 form)."""
    op, exact = EXACT[name]
    mod = _module(op)
    fast = LegalizeWithFastMath()(mod)
    text = _kernel_text(fast)
    assert not any(f"T.{f}(" in text for f in ("exp", "tanh", "erf", "sigmoid")), text
    got = _run(fast, GRID).astype("float64")
    want = exact(GRID.astype("float64"))
    scale = np.maximum(np.abs(GRID), 1) if name == "gelu" else np.maximum(np.abs(want), 1e-3)
    err = np.abs(got - want) / scale
    assert err.max() < 2e-6, (name, err.max())


TINY = np.concatenate([
    np.float32(10.0) ** np.linspace(-37, 1, 1 << 14, dtype="float32"),
    -(np.float32(10.0) ** np.linspace(-37, 1, 1 << 14, dtype="float32")),
    GRID,
]).astype("float32")  # fmt: skip


@pytest.mark.parametrize(
    "op", [relax.op.erf, relax.op.nn.gelu, relax.op.tanh, relax.op.nn.gelu_tanh]
)
def test_erf_and_tanh_take_a_tiny_arguments_square_as_zero_and_equal_tvms_forms(op):
    """The CPU erf and tanh (and the GELUs') square an argument under 1e-10 as zero (a select
    before the square in the kernel) and give exactly what ``topi.fast_erf`` and
    ``topi.fast_tanh`` give, over magnitudes from 1e-37 to 10 of both signs and the dense
    grid; with the flush off, the kernels are TOPI's, without the select."""
    mod = _module(op, TINY.shape)
    fast = LegalizeWithFastMath()(mod)
    assert "T.Select(T.fabs(" in _kernel_text(fast)
    with patch.object(fast_math, "FLUSH_TINY_SQUARES", False):
        topis = LegalizeWithFastMath()(mod)
    assert "T.Select(" not in _kernel_text(topis)
    np.testing.assert_array_equal(_run(fast, TINY), _run(topis, TINY))


def test_softmax_is_the_fast_softmax_and_matches():
    x = np.random.default_rng(0).standard_normal((8, 64)).astype("float32") * 10
    mod = _module(lambda v: relax.op.nn.softmax(v, axis=-1), x.shape)
    fast = LegalizeWithFastMath()(mod)
    assert "T.exp(" not in _kernel_text(fast)
    want = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(_run(fast, x), want / want.sum(-1, keepdims=True), rtol=1e-5,
                               atol=1e-7)  # fmt: skip


def test_gpu_operators_legalize_as_tvm_does():
    mod = _module(relax.op.sigmoid, device=CUDA)
    tvm.ir.assert_structural_equal(LegalizeWithFastMath()(mod), relax.transform.LegalizeOps()(mod))


def test_other_operators_legalize_as_tvm_does():
    mod = _module(relax.op.nn.relu)
    tvm.ir.assert_structural_equal(LegalizeWithFastMath()(mod), relax.transform.LegalizeOps()(mod))


def _power(exponent):
    return lambda v: relax.op.power(v, relax.const(exponent, "float32"))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_small_integer_power_is_a_product_of_its_base(n):
    """Before: ``power(x, n)``, one ``powf`` call an element (LLVM keeps ``pow(x, 3.0)``).
    Expected: one kernel ``x * x * ...``; numbers against numpy over negative bases too."""
    x = np.linspace(-4, 4, 257).astype("float32")
    fast = LegalizeWithFastMath()(_module(_power(float(n)), x.shape))
    bb = relax.BlockBuilder()
    arg = relax.Var("x", relax.TensorType(x.shape, "float32"))

    def product(t):
        out = t
        for _ in range(n - 1):
            out = topi.multiply(out, t)
        return out

    with bb.function("main", [arg]):
        with bb.dataflow():
            y = bb.emit_output(bb.call_te(product, arg, primfunc_name_hint="power"))
        bb.emit_func_output(y)
    expected = bb.get()
    expected.update_global_info("vdevice", fast.global_infos["vdevice"])
    tvm.ir.assert_structural_equal(fast, expected)
    np.testing.assert_allclose(_run(fast, x), x.astype("float64") ** n, rtol=1e-6)


@pytest.mark.parametrize(
    "op",
    [
        _power(2.5),  # not an integer
        _power(7.0),  # a long product: TVM's legalization
        lambda v: relax.op.power(v, v),  # not a constant
        lambda v: relax.op.power(v, relax.const(np.full((2, 1), 3.0, "float32"))),  # broadcasts
    ],
)
def test_other_powers_legalize_as_tvm_does(op):
    mod = _module(op, (4,))
    tvm.ir.assert_structural_equal(LegalizeWithFastMath()(mod), relax.transform.LegalizeOps()(mod))


def _batch_norm(constants=True, training=False, center=True, scale=True):
    """``batch_norm(x, ...)[0]`` over channels of 6, its statistics constants (or sums of
    ``x``: not constants), and the constants."""
    rng = np.random.default_rng(0)
    stats = [rng.uniform(0.5, 2, 6).astype("float32") for _ in range(4)]

    def op(v):
        if constants:
            args = [relax.const(s) for s in stats]
        else:
            args = [relax.op.sum(v, axis=[0, 2, 3])] * 4
        out = relax.op.nn.batch_norm(v, *args, axis=1, epsilon=1e-5, center=center,
                                     scale=scale, training=training)  # fmt: skip
        return relax.TupleGetItem(out, 0)

    return op, stats


@pytest.mark.parametrize(("center", "scale"), [(True, True), (False, True), (True, False)])
def test_an_inference_batch_norm_of_constants_is_one_multiply_add(center, scale):
    """Before: TVM's kernel, ``(x - mean) / sqrt(var + eps) * gamma + beta`` an element.
    Expected: ``x * a[c] + b[c]`` with ``a``, ``b`` folded; the same numbers."""
    op, (gamma, beta, mean, var) = _batch_norm(center=center, scale=scale)
    x = np.random.default_rng(1).standard_normal((2, 6, 3, 5)).astype("float32")
    mod = _module(op, x.shape)
    fast = LegalizeWithFastMath()(mod)
    text = _kernel_text(fast)
    assert "T.sqrt(" not in text, text
    a = (gamma if scale else 1) / np.sqrt(var.astype("float64") + 1e-5)
    b = (beta if center else 0) - mean * a
    want = x * a[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(_run(fast, x), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        _run(fast, x), _run(relax.transform.LegalizeOps()(mod), x), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("op", [_batch_norm(training=True)[0], _batch_norm(constants=False)[0]])
def test_other_batch_norms_legalize_as_tvm_does(op):
    mod = _module(op, (2, 6, 3, 5))
    tvm.ir.assert_structural_equal(LegalizeWithFastMath()(mod), relax.transform.LegalizeOps()(mod))


def _max_pool(window=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), **kw):
    return lambda v: relax.op.nn.max_pool2d(v, window, strides, padding, **kw)


def _numpy_max_pool(x, window, strides, padding):
    """The reference: ``x`` padded with -inf (top, left, bottom, right), each window's max."""
    top, left, bottom, right = padding
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
    rows = (padded.shape[2] - window[0]) // strides[0] + 1
    cols = (padded.shape[3] - window[1]) // strides[1] + 1
    out = np.full((*x.shape[:2], rows, cols), -np.inf, x.dtype)
    for i in range(window[0]):
        for j in range(window[1]):
            taps = padded[:, :, i : i + strides[0] * rows : strides[0]]
            out = np.maximum(out, taps[..., j : j + strides[1] * cols : strides[1]])
    return out


@pytest.mark.parametrize(
    ("shape", "window", "strides", "padding"),
    [((1, 3, 9, 56), (3, 3), (2, 2), (1, 1, 1, 1)),  # ResNet's stem pool
     ((2, 2, 7, 64), (3, 3), (2, 2), (0, 0, 0, 0)),  # Inception's, a batch of 2
     ((1, 2, 7, 60), (4, 3), (1, 2), (0, 1, 2, 0)),  # uneven window, stride and padding
     ((1, 2, 5, 30), (3, 3), (1, 1), (1, 1, 1, 1)),
     ((1, 2, 7, 55), (3, 3), (2, 2), (0, 0, 0, 0))],  # SqueezeNet 1.1's: 27 columns
)  # fmt: skip
def test_a_max_pool_is_rows_then_columns_and_matches(shape, window, strides, padding):
    """Before: TVM's kernel, every window's maximum from a padded copy. Expected: one kernel,
    marked for its rule and fused with nothing, of two stages: ``pool_rows`` (each input row's
    window maxima along the columns), then ``pool_columns`` (the output, maxima of those down
    the rows); the numbers of a numpy reference with -inf padding."""
    from tvm_hetero.ir.attrs import SEPARABLE_POOL_ATTR

    x = np.random.default_rng(2).standard_normal(shape).astype("float32")
    fast = LegalizeWithFastMath()(_module(_max_pool(window, strides, padding), shape))
    ((_, kernel),) = [(g, f) for g, f in fast.functions_items() if isinstance(f, PrimFunc)]
    assert bool(kernel.attrs[SEPARABLE_POOL_ATTR]) and int(kernel.attrs["op_pattern"]) == 8
    text = kernel.script()
    assert 'T.sblock("pool_rows")' in text and 'T.sblock("pool_columns")' in text
    assert "pad_temp" not in text  # no padded copy of the input
    want = _numpy_max_pool(x, window, strides, padding)
    np.testing.assert_array_equal(_run(fast, x), want)


@pytest.mark.parametrize(
    ("op", "shape"),
    [(_max_pool(), (1, 2, 9, 14)),  # 7 output columns: TVM's kernel was faster
     (_max_pool(), (1, 2, 9, 34)),  # 17 output columns: TVM's kernel too
     (_max_pool((2, 2), padding=0), (1, 2, 8, 64)),  # VGG's: no fewer comparisons
     (_max_pool((3, 2)), (1, 2, 9, 60)),
     (_max_pool(ceil_mode=True), (1, 2, 9, 60)),
     (_max_pool(dilation=(2, 2)), (1, 2, 9, 60)),
     (_max_pool(layout="NHWC"), (1, 9, 60, 2))],
)  # fmt: skip
def test_other_max_pools_legalize_as_tvm_does(op, shape):
    mod = _module(op, shape)
    tvm.ir.assert_structural_equal(LegalizeWithFastMath()(mod), relax.transform.LegalizeOps()(mod))


def test_a_gpu_max_pool_legalizes_as_tvm_does():
    mod = _module(_max_pool(), (1, 2, 9, 60), device=CUDA)
    tvm.ir.assert_structural_equal(LegalizeWithFastMath()(mod), relax.transform.LegalizeOps()(mod))
