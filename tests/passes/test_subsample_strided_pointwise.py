"""SubsampleStridedPointwise: strided CPU 1x1 convolutions as a subsample and a pointwise one."""

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
from tvm_hetero.passes import SubsampleStridedPointwise

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _conv_module(shape=(1, 8, 7, 9), kernel=1, stride=2, padding=0, groups=1, device=CPU):
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType(shape, "float32", vdev))
    w = relax.Var("w", relax.TensorType((16, shape[1] // groups, kernel, kernel), "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, w, stride, padding, groups=groups))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def test_a_strided_pointwise_convolution_reads_a_subsample_with_stride_1():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 8, 7, 9), "float32", "llvm:0"),
            w: R.Tensor((16, 8, 1, 1), "float32", "llvm:0"),
        ) -> R.Tensor((1, 16, 4, 5), "float32", "llvm:0"):
            with R.dataflow():
                pixels = R.strided_slice(x, axes=[2, 3], begin=[0, 0], end=[7, 9], strides=[2, 2])
                y = R.nn.conv2d(pixels, w)
                R.output(y)
            return y

    before = _conv_module()
    text = before.script()
    after = SubsampleStridedPointwise()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after, Expected)


@pytest.mark.parametrize("case", [dict(), dict(stride=(2, 1)), dict(shape=(2, 4, 8, 8), stride=3)])
def test_numbers_match_the_strided_convolution(case):
    after = same_numbers_after(SubsampleStridedPointwise(), _conv_module(**case))
    assert "strided_slice" in after.script()


@pytest.mark.parametrize(
    "case",
    [dict(stride=1), dict(kernel=3), dict(padding=1), dict(groups=2), dict(device=CUDA)],
)
def test_other_convolutions_stay(case):
    mod = _conv_module(**case)
    tvm.ir.assert_structural_equal(SubsampleStridedPointwise()(mod), mod)


def test_an_exported_downsampling_shortcut_goes_to_the_matmul_rule_and_matches(tmp_path):
    torch = pytest.importorskip("torch")
    import numpy as np

    shortcut = torch.nn.Conv2d(16, 32, 1, 2, bias=False)
    x = torch.randn(1, 16, 14, 14)
    path = tmp_path / "shortcut.onnx"
    torch.onnx.export(shortcut.eval(), (x,), str(path), input_names=["x"], dynamo=False)
    compiled = api.compile(load_model(path), [cpu_device()])
    rules = {k.rule for k in api.kernel_schedules(compiled)}
    assert "matmul" in rules and "conv" not in rules
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, shortcut(x).detach().numpy(), rtol=1e-4, atol=1e-5)
