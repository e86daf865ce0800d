"""ONNX Col2Im: numerics against ONNX Runtime and against torch's Fold, the IR it becomes, and
the shapes it refuses."""

import numpy as np
import onnx
import pytest
from conftest import op_calls
from onnx import TensorProto, helper, numpy_helper

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import UnsupportedOperatorError, load_model
from tvm_hetero.frontends.onnx_col2im import one_hot_kernels

ort = pytest.importorskip("onnxruntime")


def _col2im_model(path, channels, image, block, *, constant=True, batch=1, **attrs):
    """One ``Col2Im`` node over ``X`` of ``[1, channels * kh * kw, L]``; returns ``X``."""
    strides = attrs.get("strides", [1] * len(image))
    dilations = attrs.get("dilations", [1] * len(image))
    pads = attrs.get("pads", [0] * 2 * len(image))
    blocks = [
        (image[a] + pads[a] + pads[a + len(image)] - dilations[a] * (block[a] - 1) - 1)
        // strides[a] + 1
        for a in range(len(image))
    ]  # fmt: skip
    x = (
        np.random.default_rng(0)
        .standard_normal((1, channels * int(np.prod(block)), int(np.prod(blocks))))
        .astype("float32")
    )
    shapes = [numpy_helper.from_array(np.array(v, "int64"), n)
              for n, v in (("image", image), ("block", block))]  # fmt: skip
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, *x.shape[1:]])]
    if not constant:  # the image's shape fed at run time
        inputs.append(helper.make_tensor_value_info("image", TensorProto.INT64, [len(image)]))
        shapes = shapes[1:]
    node = helper.make_node("Col2Im", ["X", "image", "block"], ["Y"], **attrs)
    graph = helper.make_graph(
        [node], "col2im", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        shapes,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.save(model, str(path))
    return x


@pytest.mark.parametrize(
    ("channels", "image", "block", "attrs"),
    [
        (2, [5, 6], [2, 3], {}),
        (3, [7, 7], [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        (2, [9, 8], [3, 2], {"strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
        (4, [14, 14], [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # VOLO's outlooker
        (1, [6, 6], [2, 2], {"strides": [2, 2]}),  # blocks that do not overlap
        (2, [8, 8], [3, 3], {"strides": [2, 2]}),  # a last row and column no block reaches
    ],
)
def test_col2im_matches_onnx_runtime(tmp_path, channels, image, block, attrs):
    path = tmp_path / "col2im.onnx"
    x = _col2im_model(path, channels, image, block, **attrs)
    want = ort.InferenceSession(str(path)).run(None, {"X": x})[0]
    assert want.shape == (1, channels, *image)
    got = api.run(api.compile(load_model(path), [cpu_device()]), {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_col2im_over_a_symbolic_batch_matches_onnx_runtime(tmp_path):
    path = tmp_path / "col2im.onnx"
    x = _col2im_model(path, 3, [7, 7], [3, 3], batch="N", strides=[2, 2], pads=[1, 1, 1, 1])
    assert load_model(path).inputs[0].shape[0] == "N"  # imported with its batch symbolic
    want = ort.InferenceSession(str(path)).run(None, {"X": x})[0]
    model = load_model(path, shapes={"X": x.shape})
    got = api.run(api.compile(model, [cpu_device()]), {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_col2im_matches_torch_fold(tmp_path):
    torch = pytest.importorskip("torch")
    # padding the same on both axes: torch's exporter writes pads as [h, h, w, w], which ONNX
    # reads as (top, left, bottom, right)
    fold = torch.nn.Fold((10, 12), (3, 2), dilation=(1, 2), padding=(1, 1), stride=(2, 1))
    path = tmp_path / "fold.onnx"
    x = torch.randn(1, 3 * 6, 5 * 12)
    torch.onnx.export(fold, (x,), str(path), opset_version=18, dynamo=False)
    assert [n.op_type for n in onnx.load(str(path)).graph.node if n.op_type != "Constant"] == [
        "Col2Im"
    ]
    got = api.run(api.compile(load_model(path), [cpu_device()]), {"input": x.numpy()})[0]
    np.testing.assert_allclose(got, fold(x).numpy(), rtol=1e-5, atol=1e-5)


def test_col2im_is_a_grouped_transposed_convolution_with_one_hot_kernels(tmp_path):
    path = tmp_path / "col2im.onnx"
    _col2im_model(path, 3, [7, 7], [3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    calls = op_calls(load_model(path).mod)
    names = [c.op.name for c in calls]
    assert names == ["relax.reshape", "relax.nn.conv2d_transpose"]
    conv = calls[1]
    assert int(conv.attrs.groups) == 3
    assert [int(v) for v in conv.attrs.strides] == [2, 2]
    assert [int(v) for v in conv.attrs.padding] == [1, 1, 1, 1]
    assert [int(v) for v in conv.attrs.output_padding] == [0, 0]
    assert [int(v) for v in conv.args[0].ty.shape.values] == [1, 27, 4, 4]


def test_one_hot_kernels_put_each_window_position_in_its_own_channel():
    kernels = one_hot_kernels(2, (2, 3), "float32")
    assert kernels.shape == (12, 1, 2, 3)
    for channel in range(12):
        k = channel % 6
        expected = np.zeros((2, 3), "float32")
        expected[k // 3, k % 3] = 1
        np.testing.assert_array_equal(kernels[channel, 0], expected)


@pytest.mark.parametrize(
    ("image", "block", "constant", "said"),
    [
        ([4, 4, 4], [2, 2, 2], True, "3 spatial axes"),
        ([5, 6], [2, 3], False, "image_shape must be a constant"),
    ],
)
def test_col2im_it_cannot_build_is_refused_naming_why(tmp_path, image, block, constant, said):
    path = tmp_path / "col2im.onnx"
    _col2im_model(path, 2, image, block, constant=constant)
    with pytest.raises(UnsupportedOperatorError, match=said):
        load_model(path)
