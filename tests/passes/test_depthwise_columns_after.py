"""DepthwiseColumnsAfter: strided CPU depthwise convolutions along the rows, then the columns."""

import pytest
import tvm
from conftest import same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import DepthwiseColumnsAfter
from tvm_hetero.schedules.cpu import conv

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


@pytest.fixture
def without_strided_rows(monkeypatch):
    """The convolution rule as it was before its row tile took a column stride of 2
    (``conv.ROW_TILED_STEPS``): this pass rewrites stride 2 too."""
    monkeypatch.setattr(conv, "ROW_TILED_STEPS", (1,))


def _conv_module(shape=(1, 8, 9, 17), kernel=3, stride=2, padding=1, groups=8, outputs=8,
                 dilation=1, device=CPU):  # fmt: skip
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType(shape, "float32", vdev))
    wshape = (outputs, shape[1] // groups, kernel, kernel)
    w = relax.Var("w", relax.TensorType(wshape, "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, w, stride, padding, dilation, groups=groups)
            y = bb.emit_output(y)
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def test_a_strided_depthwise_convolution_keeps_its_row_stride_and_takes_every_other_column(
    without_strided_rows,
):
    """17 columns with stride 2 and padding 1: 9 outputs; with stride 1, 17, of which columns
    0, 2, ..., 16 (the slice ends one past column 16)."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 8, 9, 17), "float32", "llvm:0"),
            w: R.Tensor((8, 1, 3, 3), "float32", "llvm:0"),
        ) -> R.Tensor((1, 8, 5, 9), "float32", "llvm:0"):
            with R.dataflow():
                rows = R.nn.conv2d(x, w, strides=[2, 1], padding=[1, 1, 1, 1], groups=8)
                y = R.strided_slice(rows, axes=[3], begin=[0], end=[17], strides=[2])
                R.output(y)
            return y

    before = _conv_module()
    text = before.script()
    after = same_numbers_after(DepthwiseColumnsAfter(), before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize(
    "case",
    [dict(stride=(1, 2)), dict(shape=(1, 8, 9, 26), stride=3, kernel=5, padding=2),
     dict(shape=(2, 4, 8, 18), groups=4, outputs=4, padding=0), dict(dilation=(2, 1), padding=2),
     dict(kernel=1, padding=0)],
)  # fmt: skip
def test_numbers_match_the_strided_convolution(case, without_strided_rows):
    """Strides along the columns only and by 3, a batch of 2 unpadded, dilated rows, a window
    one column wide (its columns taken first)."""
    after = same_numbers_after(DepthwiseColumnsAfter(), _conv_module(**case))
    assert "strided_slice" in after.script()


@pytest.mark.parametrize(
    "case",
    [dict(stride=1), dict(stride=(2, 1)), dict(groups=4), dict(groups=8, outputs=16),
     dict(dilation=2, padding=2), dict(device=CUDA), dict(shape=(1, 8, 9, 13)), dict(stride=2)],
)  # fmt: skip
def test_other_convolutions_stay(case):
    """Unstrided columns, grouped or multiplied channels, dilated columns, a GPU, 7 columns;
    a column stride of 2, which the convolution rule's row tile reads as it is
    (``conv.ROW_TILED_STEPS``)."""
    mod = _conv_module(**case)
    tvm.ir.assert_structural_equal(DepthwiseColumnsAfter()(mod), mod)


@pytest.mark.parametrize(("window", "side"), [(5, 28), (3, 56), (5, 57)])
def test_an_exported_mobile_block_matches_torch(tmp_path, window, side):
    """A strided depthwise layer, ReLU6 after it, as a build compiles it (padded, fused): 14
    output columns (the channel tile), 28 (the row tile, its reads shuffled) and 29."""
    torch = pytest.importorskip("torch")
    import numpy as np

    conv2d = torch.nn.Conv2d(16, 16, window, 2, window // 2, groups=16)
    block = torch.nn.Sequential(conv2d, torch.nn.ReLU6())
    x = torch.randn(1, 16, side, side)
    path = tmp_path / "block.onnx"
    torch.onnx.export(block.eval(), (x,), str(path), input_names=["x"], dynamo=False)
    compiled = api.compile(load_model(path), [cpu_device()])
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, block(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_a_window_one_column_wide_takes_the_input_columns_first(without_strided_rows):
    """MobileOne's strided 1x1 depthwise branch: no column of the convolution is thrown away."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 8, 9, 17), "float32", "llvm:0"),
            w: R.Tensor((8, 1, 1, 1), "float32", "llvm:0"),
        ) -> R.Tensor((1, 8, 5, 9), "float32", "llvm:0"):
            with R.dataflow():
                columns = R.strided_slice(x, axes=[3], begin=[0], end=[17], strides=[2])
                y = R.nn.conv2d(columns, w, strides=[2, 1], groups=8)
                R.output(y)
            return y

    after = same_numbers_after(DepthwiseColumnsAfter(), _conv_module(kernel=1, padding=0))
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize(("channels", "rewritten"), [(16, False), (12, True)])
def test_constant_weights_the_channel_tile_takes_stay(channels, rewritten, without_strided_rows):
    """14 output columns with stride 2 and constant weights: with whole vectors of channels
    (AVX2's 8 lanes) the convolution rule reads a vector of channels a position whatever the
    stride, so the convolution stays; 12 channels are still rewritten."""
    import numpy as np

    vdev = VDevice(make_target(CPU), 0, "global")
    x = relax.Var("x", relax.TensorType((1, channels, 9, 28), "float32", vdev))
    weights = np.random.default_rng(0).standard_normal((channels, 1, 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            w = relax.const(weights)
            y = bb.emit_output(relax.op.nn.conv2d(x, w, 2, 1, groups=channels))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    after = DepthwiseColumnsAfter()(mod)
    assert ("strided_slice" in after.script()) == rewritten
