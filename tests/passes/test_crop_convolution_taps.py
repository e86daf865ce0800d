"""CropConvolutionTaps: the taps of a convolution that read only its padding are dropped."""

import pytest
import tvm
from conftest import conv_axes, conv_module, same_numbers_after
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.passes import CropConvolutionTaps
from tvm_hetero.passes.crop_convolution_taps import reaching_taps


def test_an_atrous_tap_beyond_the_map_leaves_a_1x1_convolution():
    """DeepLabV3's rate 24 over a 14 x 14 map: every tap but the centre reads padding."""

    @I.ir_module
    class Expected:
        @R.function
        def main(
            x: R.Tensor((1, 8, 14, 14), "float32"), w: R.Tensor((4, 8, 3, 3), "float32")
        ) -> R.Tensor((1, 4, 14, 14), "float32"):
            with R.dataflow():
                lv = R.strided_slice(w, axes=[2, 3], begin=[1, 1], end=[2, 2])
                y = R.nn.conv2d(x, lv, padding=[0, 0, 0, 0], dilation=[24, 24])
                R.output(y)
            return y

    before = conv_module((1, 8, 14, 14), (4, 8, 3, 3), padding=24, dilation=24)
    after = same_numbers_after(CropConvolutionTaps(), before)
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize(
    ("shape", "weights", "attrs"),
    [
        ((1, 4, 14, 14), (3, 4, 3, 3), {"padding": 36, "dilation": 36}),
        ((1, 4, 14, 10), (3, 4, 3, 3), {"padding": (24, 1), "dilation": (24, 1)}),  # one axis
        ((1, 4, 5, 5), (3, 4, 5, 5), {"padding": 8, "dilation": 4, "strides": 2}),  # both ends
        ((1, 6, 7, 7), (6, 1, 3, 3), {"padding": 8, "dilation": 8, "groups": 6}),  # depthwise
        ((1, 4, 5, 8), (3, 4, 3, 3), {"padding": (4, 4, 0, 0), "dilation": 4}),  # uneven pads
    ],
)  # fmt: skip
def test_cropped_windows_keep_their_numbers(shape, weights, attrs):
    before = conv_module(shape, weights, **attrs)
    after = same_numbers_after(CropConvolutionTaps(), before)
    conv = after["main"].body.blocks[0].bindings[-1].value
    assert [int(d) for d in conv.args[1].ty.shape.values][2:] != list(weights[2:])  # cropped


@pytest.mark.parametrize(
    ("shape", "weights", "attrs"),
    [
        ((1, 4, 14, 14), (3, 4, 3, 3), {"padding": 1}),
        ((1, 4, 14, 14), (3, 4, 3, 3), {"padding": 12, "dilation": 12}),  # every tap reaches
        ((1, 4, 14, 14), (3, 4, 3, 3), {"padding": 1, "data_layout": "NHWC"}),
    ],
)  # fmt: skip
def test_windows_whose_every_tap_reads_the_input_are_left(shape, weights, attrs):
    if attrs.get("data_layout") == "NHWC":
        shape = (shape[0], shape[2], shape[3], shape[1])
    before = conv_module(shape, weights, **attrs)
    tvm.ir.assert_structural_equal(CropConvolutionTaps()(before), before)


def test_reaching_taps_are_those_some_output_reads_the_input_with():
    """Against every output tried, over sizes, windows, strides, dilations and paddings."""
    for axis, reading in conv_axes():
        reach = [k for k, outputs in enumerate(reading) if outputs]
        want = (reach[0], reach[-1]) if reach else (1, 0)
        assert reaching_taps(*axis) == want
