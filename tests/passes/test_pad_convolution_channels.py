"""PadConvolutionChannels: CPU convolutions whose output channels no vector divides computed
over whole vectors of them, cropped."""

import numpy as np
import pytest
import tvm
from conftest import one_op_module, same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero._compat import PrimFunc
from tvm_hetero.passes import PadConvolutionChannels
from tvm_hetero.pipelines import get_pipeline

ZEN4 = {"kind": "llvm", "mcpu": "znver4"}  # AVX-512: 16 lanes of float32, two a tile
HASWELL = {"kind": "llvm", "mcpu": "haswell"}  # AVX2: 8 lanes
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _weights(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _conv(x_shape, weights, device=ZEN4, conv=relax.op.nn.conv2d, **attrs) -> tvm.IRModule:
    """``main(x) = conv(x, weights)`` on one vdevice of ``device``, the weights a constant."""
    return one_op_module(device, [("x", x_shape)], lambda x: conv(x, relax.const(weights), **attrs))


def _widened(weights: np.ndarray, channels: int) -> np.ndarray:
    wide = np.zeros((channels, *weights.shape[1:]), "float32")
    wide[: weights.shape[0]] = weights
    return wide


def test_230_output_channels_are_computed_as_256_and_cropped():
    """Two vectors of 16 a tile with AVX-512: 230 channels become 256 (an eighth more at most),
    the weights' new channels zeros."""
    weights = _weights((230, 64, 3, 3))
    wide = _widened(weights, 256)

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(ZEN4, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 64, 28, 28), "float32", "llvm:0"),
        ) -> R.Tensor((1, 230, 14, 14), "float32", "llvm:0"):
            with R.dataflow():
                y = R.nn.conv2d(x, R.const(wide), strides=[2, 2], padding=[1, 1, 1, 1])
                gv = R.strided_slice(y, axes=[1], begin=[0], end=[230])
                R.output(gv)
            return gv

    before = _conv((1, 64, 28, 28), weights, strides=2, padding=1)
    text = before.script()
    after = PadConvolutionChannels()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after["main"], Expected["main"], map_free_vars=True)


def test_a_conv3d_is_widened_the_same_way():
    """R(2+1)D's factorised 1x3x3 convolutions: 60 channels become 64."""
    weights = _weights((60, 32, 1, 3, 3))

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(ZEN4, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 32, 2, 7, 7), "float32", "llvm:0"),
        ) -> R.Tensor((1, 60, 2, 7, 7), "float32", "llvm:0"):
            with R.dataflow():
                y = R.nn.conv3d(
                    x, R.const(_widened(weights, 64)), strides=[1, 1, 1], padding=[0, 1, 1, 0, 1, 1]
                )
                gv = R.strided_slice(y, axes=[1], begin=[0], end=[60])
                R.output(gv)
            return gv

    after = PadConvolutionChannels()(
        _conv((1, 32, 2, 7, 7), weights, conv=relax.op.nn.conv3d, padding=(0, 1, 1))
    )
    tvm.ir.assert_structural_equal(after["main"], Expected["main"], map_free_vars=True)


def test_one_vector_when_two_would_add_more_than_an_eighth():
    """100 channels: 128 (two vectors) is over a quarter more, 112 (one vector) an eighth;
    the width tile would take 5 of them (a divisor of 100), not 8."""
    after = PadConvolutionChannels()(_conv((1, 32, 14, 14), _weights((100, 32, 3, 3)), padding=1))
    conv, crop = (b.var for b in after["main"].body.blocks[0].bindings)
    assert int(conv.ty.shape.values[1]) == 112
    assert [int(d) for d in crop.ty.shape.values] == [1, 100, 14, 14]


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "device", "attrs"),
    [
        ((1, 32, 14, 14), (64, 32, 3, 3), ZEN4, {"padding": 1}),  # whole vectors already
        ((1, 32, 14, 14), (36, 32, 3, 3), ZEN4, {"padding": 1}),  # 48 is a third more
        ((1, 36, 56, 56), (72, 36, 3, 3), ZEN4, {"padding": 1, "strides": 2}),  # 8 a width tile
        ((1, 32, 14, 14), (60, 16, 3, 3), ZEN4, {"padding": 1, "groups": 2}),  # grouped
        ((1, 32, 14, 14), (60, 32, 1, 1), ZEN4, {}),  # pointwise: the matmul rule's
        ((1, 64, 28, 28), (230, 64, 3, 3), HASWELL, {"padding": 1}),  # no channel tile 28 wide
        ((1, 32, 14, 14), (60, 32, 3, 3), CUDA, {"padding": 1}),  # not a CPU
    ],
)
def test_convolutions_the_widening_does_not_serve_stay(x_shape, w_shape, device, attrs):
    mod = _conv(x_shape, _weights(w_shape), device, **attrs)
    tvm.ir.assert_structural_equal(PadConvolutionChannels()(mod), mod)


def test_weights_given_at_run_time_stay():
    """Only constant weights can be widened once, at compile time."""
    mod = one_op_module(
        ZEN4, [("x", (1, 32, 14, 14)), ("w", (60, 32, 3, 3))],
        lambda x, w: relax.op.nn.conv2d(x, w, padding=1),
    )  # fmt: skip
    tvm.ir.assert_structural_equal(PadConvolutionChannels()(mod), mod)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "conv", "attrs"),
    [
        ((1, 16, 9, 9), (30, 16, 3, 3), relax.op.nn.conv2d, {"padding": 1, "strides": 2}),
        ((1, 16, 3, 7, 7), (60, 16, 3, 1, 1), relax.op.nn.conv3d, {"padding": (1, 0, 0)}),
    ],
)
def test_numbers_match_the_unwidened_convolution(x_shape, w_shape, conv, attrs):
    mod = _conv(x_shape, _weights(w_shape), ZEN4, conv, **attrs)
    after = same_numbers_after(PadConvolutionChannels(), mod)
    assert "strided_slice" in after.script()


def test_the_widened_convolution_gets_weights_packed_by_channel():
    """Through the build's pipeline: the kernel's weights are the widened ones, packed a vector
    of output channels innermost (the convolution rule's channel tile), and the crop is fused
    into it."""
    mod = _conv((1, 64, 28, 28), _weights((230, 64, 3, 3)), strides=2, padding=1)
    lowered = get_pipeline("multi_device_lower")(mod)
    (kernel,) = [f for _, f in lowered.functions_items() if isinstance(f, PrimFunc)]
    shapes = [[int(d) for d in p.shape] for p in kernel.params]
    assert shapes == [[1, 64, 28, 28], [16, 64, 3, 3, 16], [1, 230, 14, 14]]
