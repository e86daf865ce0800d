"""TransposedConvolutionsAsPointwise: CPU transposed convolutions whose window is their stride
computed as a 1x1 convolution to every output channel's window, then laid out as the map."""

import numpy as np
import pytest
import torch
import tvm
from conftest import one_op_module, same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import TransposedConvolutionsAsPointwise
from tvm_hetero.passes.transposed_convolutions_as_pointwise import pointwise_weights

HASWELL = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _weights(shape) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def _transposed(x_shape, weights, device=HASWELL, **attrs) -> tvm.IRModule:
    return one_op_module(
        device, [("x", x_shape)],
        lambda x: relax.op.nn.conv2d_transpose(x, relax.const(weights), **attrs),
    )  # fmt: skip


def test_a_2x2_window_of_stride_2_becomes_a_1x1_convolution_laid_out_as_the_map():
    weights = _weights((4, 3, 2, 2))  # (in, out, kh, kw)
    pointwise = pointwise_weights(weights)

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(HASWELL, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 4, 5, 6), "float32", "llvm:0"),
        ) -> R.Tensor((1, 3, 10, 12), "float32", "llvm:0"):
            with R.dataflow():
                t = R.nn.conv2d(x, R.const(pointwise))
                split = R.reshape(t, R.shape([1, 3, 2, 2, 5, 6]))
                laid_out = R.permute_dims(split, [0, 1, 4, 2, 5, 3])
                gv = R.reshape(laid_out, R.shape([1, 3, 10, 12]))
                R.output(gv)
            return gv

    before = _transposed((1, 4, 5, 6), weights, strides=2)
    text = before.script()
    after = TransposedConvolutionsAsPointwise()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after["main"], Expected["main"], map_free_vars=True)


def test_the_pointwise_weights_put_each_output_channels_window_together():
    """Channel ``(o kh + i) kw + j`` of the 1x1 weights is ``w[:, o, i, j]``."""
    w = _weights((5, 3, 2, 4))
    p = pointwise_weights(w)
    assert p.shape == (3 * 2 * 4, 5, 1, 1)
    for o, i, j in [(0, 0, 0), (1, 1, 3), (2, 0, 2)]:
        np.testing.assert_array_equal(p[(o * 2 + i) * 4 + j, :, 0, 0], w[:, o, i, j])


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [((1, 8, 5, 7), (8, 4, 2, 2), {"strides": 2}),
     ((2, 6, 3, 4), (6, 5, 4, 4), {"strides": 4}),
     ((1, 4, 6, 5), (4, 3, 2, 3), {"strides": (2, 3)})],
)  # fmt: skip
def test_numbers_match_the_transposed_convolution(x_shape, w_shape, attrs):
    after = same_numbers_after(
        TransposedConvolutionsAsPointwise(), _transposed(x_shape, _weights(w_shape), **attrs)
    )
    assert "conv2d_transpose" not in after.script()


@pytest.mark.parametrize(
    ("w_shape", "device", "attrs"),
    [((8, 4, 3, 3), HASWELL, {"strides": 2, "padding": 1}),  # windows overlap
     ((8, 4, 2, 2), HASWELL, {"strides": 1}),  # a stride under the window
     ((8, 4, 2, 2), HASWELL, {"strides": 2, "padding": 1}),  # padded
     ((8, 4, 2, 2), HASWELL, {"strides": 2, "output_padding": 1}),
     ((8, 4, 2, 2), HASWELL, {"strides": 2, "dilation": 2}),
     ((8, 2, 2, 2), HASWELL, {"strides": 2, "groups": 2}),
     ((8, 4, 2, 2), CUDA, {"strides": 2})],
)  # fmt: skip
def test_other_transposed_convolutions_stay(w_shape, device, attrs):
    mod = _transposed((1, 8, 5, 7), _weights(w_shape), device, **attrs)
    tvm.ir.assert_structural_equal(TransposedConvolutionsAsPointwise()(mod), mod)


def test_weights_given_at_run_time_are_laid_out_in_the_module():
    mod = one_op_module(
        HASWELL, [("x", (1, 8, 5, 7)), ("w", (8, 4, 2, 2))],
        lambda x, w: relax.op.nn.conv2d_transpose(x, w, strides=2),
    )  # fmt: skip
    after = same_numbers_after(TransposedConvolutionsAsPointwise(), mod)
    text = after.script()
    assert text.count("R.permute_dims") == 2 and "conv2d_transpose" not in text


def test_an_exported_up_convolution_compiles_to_torchs_numbers(tmp_path):
    """A ``ConvTranspose2d`` with its bias, then a ReLU, through ``api.compile``: no kernel
    of a transposed convolution is left, and the output is torch's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.ConvTranspose2d(16, 8, 2, 2), torch.nn.ReLU()).eval()
    x = torch.randn(1, 16, 6, 7)
    path = tmp_path / "up.onnx"
    torch.onnx.export(model, (x,), str(path), input_names=["x"], dynamo=False, opset_version=17)
    compiled = api.compile(load_model(path), [cpu_device()])
    kernels = [k.kernel for k in api.kernel_schedules(compiled)]
    assert not any("conv2d_transpose" in k for k in kernels), kernels
    assert any("conv2d" in k for k in kernels), kernels
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
