"""Conv1dAsMatmul: CPU 1-D convolutions as their windows' columns times the weights."""

import numpy as np
import pytest
import tvm
from conftest import one_op_module, same_numbers_after
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import Conv1dAsMatmul

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _conv1d_module(length=9, stride=2, padding=(1, 1), dilation=1, groups=1, device=CPU,
                   channels=4, taps=3):  # fmt: skip
    params = [("x", (2, channels, length)), ("w", (6, channels // groups, taps))]
    return one_op_module(
        device, params, lambda x, w: relax.op.nn.conv1d(x, w, stride, padding, dilation, groups)
    )


def test_a_strided_padded_convolution_becomes_windows_and_a_product():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @R.function
        def main(
            x: R.Tensor((2, 4, 9), "float32", "llvm:0"),
            w: R.Tensor((6, 4, 3), "float32", "llvm:0"),
        ) -> R.Tensor((2, 6, 5), "float32", "llvm:0"):
            with R.dataflow():
                padded = R.nn.pad(x, [0, 0, 0, 0, 1, 1])
                tap0 = R.strided_slice(padded, axes=[2], begin=[0], end=[9], strides=[2])
                tap1 = R.strided_slice(padded, axes=[2], begin=[1], end=[10], strides=[2])
                tap2 = R.strided_slice(padded, axes=[2], begin=[2], end=[11], strides=[2])
                columns = R.concat([tap0, tap1, tap2], axis=1)
                weights = R.reshape(R.permute_dims(w, [0, 2, 1]), R.shape([6, 12]))
                y = R.matmul(weights, columns)
                R.output(y)
            return y

    before = _conv1d_module()
    text = before.script()
    after = Conv1dAsMatmul()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after["main"], Expected["main"])


@pytest.mark.parametrize(
    "case",
    [dict(), dict(stride=1, padding=(0, 0)), dict(dilation=2, length=12),
     dict(stride=5, taps=10, padding=(0, 0), length=40, channels=1), dict(taps=1, padding=(0, 0))],
)  # fmt: skip
def test_numbers_match_the_convolution(case):
    after = same_numbers_after(Conv1dAsMatmul(), _conv1d_module(**case))
    assert "conv1d" not in after.script() and "matmul" in after.script()


@pytest.mark.parametrize("case", [dict(groups=2), dict(device=CUDA)])
def test_grouped_and_gpu_convolutions_stay(case):
    mod = _conv1d_module(**case)
    tvm.ir.assert_structural_equal(Conv1dAsMatmul()(mod), mod)


def test_an_exported_audio_front_end_is_built_with_products_and_matches(tmp_path):
    torch = pytest.importorskip("torch")
    front = torch.nn.Sequential(
        torch.nn.Conv1d(1, 16, 10, 5), torch.nn.GELU(), torch.nn.Conv1d(16, 16, 3, 2, padding=1)
    )
    x = torch.randn(1, 1, 400)
    path = tmp_path / "front.onnx"
    torch.onnx.export(front.eval(), (x,), str(path), input_names=["x"], dynamo=False)
    compiled = api.compile(load_model(path), [cpu_device()])
    rules = {k.rule for k in api.kernel_schedules(compiled)}
    assert "matmul" in rules and "conv" not in rules
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, front(x).detach().numpy(), rtol=1e-4, atol=1e-5)
