"""TemporalConvolutionsAs2D: CPU 3-D convolutions with a window along time only computed as
2-D convolutions over (time, height x width)."""

import numpy as np
import pytest
import tvm
from conftest import one_op_module, same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.passes import TemporalConvolutionsAs2D

ZEN4 = {"kind": "llvm", "mcpu": "znver4"}  # AVX-512: the channel tile takes rows up to 56 wide
HASWELL = {"kind": "llvm", "mcpu": "haswell"}  # AVX2: rows up to 5 wide
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _weights(shape) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def _conv3d(x_shape, weights, device=ZEN4, **attrs) -> tvm.IRModule:
    return one_op_module(
        device, [("x", x_shape)], lambda x: relax.op.nn.conv3d(x, relax.const(weights), **attrs)
    )


def test_a_window_of_three_frames_over_rows_too_wide_for_the_channel_tile_becomes_2d():
    weights = _weights((32, 16, 3, 1, 1))
    flat = weights.reshape(32, 16, 3, 1)

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(ZEN4, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 16, 8, 2, 64), "float32", "llvm:0"),
        ) -> R.Tensor((1, 32, 8, 2, 64), "float32", "llvm:0"):
            with R.dataflow():
                planes = R.reshape(x, R.shape([1, 16, 8, 128]))
                y = R.nn.conv2d(planes, R.const(flat), strides=[1, 1], padding=[1, 0, 1, 0])
                gv = R.reshape(y, R.shape([1, 32, 8, 2, 64]))
                R.output(gv)
            return gv

    before = _conv3d((1, 16, 8, 2, 64), weights, padding=(1, 0, 0))
    text = before.script()
    after = TemporalConvolutionsAs2D()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after["main"], Expected["main"], map_free_vars=True)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "device", "attrs"),
    [
        ((1, 32, 8, 14, 14), (32, 32, 3, 1, 1), ZEN4, {"padding": (1, 0, 0)}),  # channel tile
        ((1, 16, 8, 2, 64), (32, 16, 3, 3, 3), ZEN4, {"padding": 1}),  # a spatial window
        ((1, 16, 8, 2, 64), (32, 16, 3, 1, 1), ZEN4, {"strides": (1, 2, 2)}),  # a spatial stride
        ((1, 16, 8, 2, 64), (32, 8, 3, 1, 1), ZEN4, {"groups": 2}),  # grouped
        ((1, 16, 8, 2, 64), (32, 16, 3, 1, 1), CUDA, {}),  # not a CPU
    ],
)
def test_other_3d_convolutions_stay(x_shape, w_shape, device, attrs):
    mod = _conv3d(x_shape, _weights(w_shape), device, **attrs)
    tvm.ir.assert_structural_equal(TemporalConvolutionsAs2D()(mod), mod)


def test_numbers_match_with_a_stride_dilation_and_uneven_padding_along_time():
    attrs = {"strides": (2, 1, 1), "dilation": (2, 1, 1), "padding": (1, 0, 0, 2, 0, 0)}
    mod = _conv3d((1, 8, 9, 3, 9), _weights((8, 8, 3, 1, 1)), HASWELL, **attrs)
    after = same_numbers_after(TemporalConvolutionsAs2D(), mod)
    assert "conv2d" in after.script() and "conv3d" not in after.script()


def test_weights_given_at_run_time_are_reshaped_in_the_module():
    mod = one_op_module(
        HASWELL, [("x", (1, 8, 6, 3, 9)), ("w", (8, 8, 3, 1, 1))],
        lambda x, w: relax.op.nn.conv3d(x, w, padding=(1, 0, 0)),
    )  # fmt: skip
    after = same_numbers_after(TemporalConvolutionsAs2D(), mod)
    assert after.script().count("R.reshape") == 3  # the data, the weights, the output
