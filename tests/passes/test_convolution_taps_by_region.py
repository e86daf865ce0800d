"""ConvolutionTapsByRegion: a convolution whose taps mostly read padding, tap by tap over the
outputs each tap reaches the input from."""

import pytest
import tvm
from conftest import conv_axes, conv_module, same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.passes import ConvolutionTapsByRegion
from tvm_hetero.passes.crop_convolution_taps import tap_outputs


@I.ir_module
class Expected:
    """A 3 x 1 window of rate 3 over 4 rows: the first tap reaches the input from the last
    output only (input row 0), the centre from all four (the whole input, no slice), the last
    from the first output only (input row 3); each a 1x1 convolution, padded back, summed."""

    @R.function
    def main(
        x: R.Tensor((1, 2, 4, 1), "float32"), w: R.Tensor((2, 2, 3, 1), "float32")
    ) -> R.Tensor((1, 2, 4, 1), "float32"):
        with R.dataflow():
            lv = R.strided_slice(x, (2, 3), (0, 0), (1, 1), (1, 1))
            lv1 = R.strided_slice(w, (2, 3), (0, 0), (1, 1))
            lv2 = R.nn.conv2d(lv, lv1)
            lv3 = R.nn.pad(lv2, pad_width=[0, 0, 0, 0, 3, 0, 0, 0])
            lv5 = R.strided_slice(w, (2, 3), (1, 0), (2, 1))
            lv6 = R.nn.conv2d(x, lv5)
            lv7 = R.add(lv3, lv6)
            lv8 = R.strided_slice(x, (2, 3), (3, 0), (4, 1), (1, 1))
            lv9 = R.strided_slice(w, (2, 3), (2, 0), (3, 1))
            lv10 = R.nn.conv2d(lv8, lv9)
            lv11 = R.nn.pad(lv10, pad_width=[0, 0, 0, 0, 0, 3, 0, 0])
            lv12 = R.add(lv7, lv11)
            gv = lv12
            R.output(gv)
        return gv


def test_a_window_reaching_the_input_from_few_outputs_is_computed_tap_by_tap():
    before = conv_module((1, 2, 4, 1), (2, 2, 3, 1), padding=(3, 0, 3, 0), dilation=(3, 1))
    after = same_numbers_after(ConvolutionTapsByRegion(), before)
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize(
    ("shape", "weights", "attrs"),
    [
        ((1, 8, 14, 14), (4, 8, 3, 3), {"padding": 12, "dilation": 12}),  # DeepLabV3's rate 12
        ((1, 4, 11, 9), (3, 4, 3, 3), {"padding": 8, "dilation": 8, "strides": 2}),
        ((1, 6, 10, 10), (6, 1, 3, 3), {"padding": 9, "dilation": 9, "groups": 6}),
        ((1, 4, 9, 12), (3, 4, 3, 3), {"padding": (7, 10, 7, 10), "dilation": (7, 10)}),
    ],
)  # fmt: skip
def test_tap_by_tap_keeps_the_numbers(shape, weights, attrs):
    after = same_numbers_after(ConvolutionTapsByRegion(), conv_module(shape, weights, **attrs))
    ops = [b.value.op.name for b in after["main"].body.blocks[0].bindings
           if isinstance(b.value, relax.Call)]  # fmt: skip
    assert ops.count("relax.nn.conv2d") > 1


@pytest.mark.parametrize(
    ("shape", "weights", "attrs"),
    [
        ((1, 4, 14, 14), (3, 4, 3, 3), {"padding": 1}),
        ((1, 4, 32, 32), (3, 4, 3, 3), {"padding": 12, "dilation": 12}),  # most reach
        ((1, 4, 14, 14), (3, 4, 1, 1), {}),
        ((1, 4, 2, 2), (3, 4, 3, 3), {"padding": 1}),  # under half reach, but undilated
    ],
)  # fmt: skip
def test_windows_that_mostly_reach_the_input_are_left(shape, weights, attrs):
    before = conv_module(shape, weights, **attrs)
    tvm.ir.assert_structural_equal(ConvolutionTapsByRegion()(before), before)


def test_tap_outputs_are_the_outputs_that_read_the_input():
    """Against every output tried, over sizes, windows, strides, dilations and paddings."""
    for axis, reading in conv_axes():
        spans = tap_outputs(*axis)
        assert [list(range(first, end)) for first, end in spans] == reading
