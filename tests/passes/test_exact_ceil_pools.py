"""ExactCeilPools: pools in ceil mode whose windows fit exactly are computed in floor mode."""

import pytest
import tvm
from conftest import same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.passes import ExactCeilPools


def _pool_module(shape, make, **attrs):
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(make(x, **attrs))
        bb.emit_func_output(y)
    return bb.get()


def test_squeezenets_pool_is_computed_in_floor_mode():
    """3 x 3, stride 2 over 111: the last window ends on column 110, ceil mode adds none."""

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 111, 111), "float32")) -> R.Tensor((1, 4, 55, 55), "float32"):
            with R.dataflow():
                y = R.nn.max_pool2d(x, pool_size=[3, 3], strides=[2, 2], ceil_mode=False)
                R.output(y)
            return y

    before = _pool_module(
        (1, 4, 111, 111), relax.op.nn.max_pool2d, pool_size=3, strides=2, ceil_mode=True
    )
    text = before.script()
    after = same_numbers_after(ExactCeilPools(), before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize(
    ("make", "shape", "attrs"),
    [
        (relax.op.nn.max_pool2d, (1, 3, 27, 27), {"pool_size": 3, "strides": 2}),
        (relax.op.nn.avg_pool2d, (1, 3, 14, 14), {"pool_size": 2, "strides": 2}),
        (relax.op.nn.max_pool2d, (1, 3, 13, 13), {"pool_size": 3, "strides": 2, "padding": 1}),
        (relax.op.nn.avg_pool2d, (1, 13, 13, 3), {"pool_size": 3, "strides": 2, "padding": 1,
                                                  "layout": "NHWC", "count_include_pad": True}),
        (relax.op.nn.max_pool1d, (1, 3, 17), {"pool_size": 3, "strides": 2, "dilation": 2}),
        (relax.op.nn.avg_pool3d, (1, 2, 5, 7, 9), {"pool_size": 3, "strides": 2}),
    ],
)  # fmt: skip
def test_exact_pools_lose_ceil_mode_and_keep_their_numbers(make, shape, attrs):
    after = same_numbers_after(ExactCeilPools(), _pool_module(shape, make, ceil_mode=True, **attrs))
    (binding,) = after["main"].body.blocks[0].bindings
    assert not binding.value.attrs.ceil_mode


@pytest.mark.parametrize(
    ("make", "shape", "attrs"),
    [
        (relax.op.nn.max_pool2d, (1, 3, 112, 112), {"pool_size": 3, "strides": 2}),  # GoogLeNet
        (relax.op.nn.max_pool2d, (1, 3, 27, 28), {"pool_size": 3, "strides": 2}),  # one axis
        (relax.op.nn.avg_pool2d, (1, 3, 15, 15), {"pool_size": 2, "strides": 2}),
        (relax.op.nn.max_pool2d, (1, 3, 2, 2), {"pool_size": 3, "strides": 1, "padding": 0}),
    ],
)
def test_pools_whose_last_window_hangs_over_keep_ceil_mode(make, shape, attrs):
    mod = _pool_module(shape, make, ceil_mode=True, **attrs)
    tvm.ir.assert_structural_equal(ExactCeilPools()(mod), mod)


def test_floor_mode_and_symbolic_pools_are_left_alone():
    floor = _pool_module((1, 3, 27, 27), relax.op.nn.max_pool2d, pool_size=3, strides=2)
    tvm.ir.assert_structural_equal(ExactCeilPools()(floor), floor)
    n = tvm.tirx.Var("n", "int64")
    symbolic = _pool_module(
        (1, 3, n, 27), relax.op.nn.max_pool2d, pool_size=3, strides=2, ceil_mode=True
    )
    tvm.ir.assert_structural_equal(ExactCeilPools()(symbolic), symbolic)
