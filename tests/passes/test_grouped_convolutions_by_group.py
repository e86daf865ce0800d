"""GroupedConvolutionsByGroup: CPU grouped convolutions with a group axis of their own."""

import numpy as np
import pytest
import tvm
from conftest import one_op_module, same_numbers_after
from tvm import relax, s_tir
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr

from tvm_hetero import api
from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import GroupedConvolutionsByGroup

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _grouped_module(groups=4, stride=1, padding=(1, 1, 1, 1), dilation=1, device=CPU,
                    channels=8, size=9, out_dtype=None):  # fmt: skip
    params = [("x", (2, channels, size, size)), ("w", (24, channels // groups, 3, 3))]
    return one_op_module(device, params, lambda x, w: relax.op.nn.conv2d(
        x, w, stride, padding, dilation, groups, out_dtype=out_dtype
    ))  # fmt: skip


def _uses(expr, var):
    return any(v.same_as(var) for v in collect_vars_used_in_prim_expr(expr))


def test_the_convolution_becomes_a_kernel_by_group_and_a_reshape():
    before = _grouped_module()
    text = before.script()
    after = GroupedConvolutionsByGroup()(before)
    assert before.script() == text  # the input is not mutated
    (kernel, reshape) = after["main"].body.blocks[0].bindings
    assert kernel.value.op.name == "relax.call_tir"
    assert kernel.value.args[0].name_hint == "conv2d_by_group"
    assert [int(d) for d in kernel.var.ty.shape.values] == [2, 4, 6, 9, 9]  # N, G, O / G, H, W
    assert reshape.value.op.name == "relax.reshape"
    tvm.ir.assert_structural_equal(reshape.var.ty, before["main"].ret_ty)
    sch = s_tir.Schedule(after["conv2d_by_group"])
    conv = sch.get(sch.get_sblock("conv2d_by_group"))
    data, weights = conv.reads
    channel = conv.iter_vars[2].var  # the output channel within its group
    assert (str(data.source.name), str(weights.source.name)) == ("PadInput", "w")
    assert not any(_uses(r.min, channel) for r in data.region)  # the rule's channel axis
    assert _uses(weights.region[0].min, channel)


@pytest.mark.parametrize(
    "case",
    [dict(), dict(stride=2), dict(padding=(0, 1, 2, 0)), dict(dilation=2, size=11),
     dict(groups=2), dict(groups=4, channels=16)],
)  # fmt: skip
def test_numbers_match_the_grouped_convolution(case):
    after = same_numbers_after(GroupedConvolutionsByGroup(), _grouped_module(**case))
    assert "conv2d_by_group" in after.script()


@pytest.mark.parametrize(
    "case", [dict(groups=8), dict(groups=1), dict(device=CUDA), dict(out_dtype="float64")]
)  # depthwise, ungrouped, GPU, a sum in another type
def test_other_convolutions_stay(case):
    mod = _grouped_module(**case)
    tvm.ir.assert_structural_equal(GroupedConvolutionsByGroup()(mod), mod)


@pytest.mark.parametrize(
    ("channels", "kernel"), [(24, "conv2d_by_group"), (64, "_channels")]
)  # 6 channels a group: by group; 16 (RegNet-X's): a vector of channels on AVX2 and AVX-512
def test_an_exported_grouped_block_gets_the_channel_tile_and_matches(tmp_path, channels, kernel):
    """Groups of channels no vector fills are computed by group; groups a vector of the CPU's
    lanes divides keep TOPI's kernel, their weights packed by channel for the convolution
    rule's channel-vectorized tile; both match torch."""
    torch = pytest.importorskip("torch")
    conv = torch.nn.Conv2d(channels, channels, 3, 2, 1, groups=4)
    block = torch.nn.Sequential(conv, torch.nn.ReLU())
    x = torch.randn(1, channels, 14, 14)
    path = tmp_path / "block.onnx"
    torch.onnx.export(block.eval(), (x,), str(path), input_names=["x"], dynamo=False)
    compiled = api.compile(load_model(path), [cpu_device()])
    rules = {k.kernel: k.rule for k in api.kernel_schedules(compiled)}
    assert any(kernel in k and r == "conv" for k, r in rules.items()), rules
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, block(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def _grouped_module_1d(groups=4, stride=1, padding=(2, 2), dilation=1, channels=8, taps=5):
    vdev = VDevice(make_target(CPU), 0, "global")
    x = relax.Var("x", relax.TensorType((2, channels, 13), "float32", vdev))
    w = relax.Var("w", relax.TensorType((12, channels // groups, taps), "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv1d(x, w, stride, padding, dilation, groups))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def test_a_grouped_1d_convolution_becomes_a_kernel_by_group_and_a_reshape():
    before = _grouped_module_1d()
    after = GroupedConvolutionsByGroup()(before)
    (kernel, reshape) = after["main"].body.blocks[0].bindings
    assert kernel.value.args[0].name_hint == "conv1d_by_group"
    assert [int(d) for d in kernel.var.ty.shape.values] == [2, 4, 3, 13]  # N, G, O / G, L
    tvm.ir.assert_structural_equal(reshape.var.ty, before["main"].ret_ty)
    sch = s_tir.Schedule(after["conv1d_by_group"])
    conv = sch.get(sch.get_sblock("conv1d_by_group"))
    data, weights = conv.reads
    channel = conv.iter_vars[2].var
    assert not any(_uses(r.min, channel) for r in data.region)  # the rule's channel axis
    assert _uses(weights.region[0].min, channel)


@pytest.mark.parametrize(
    "case",
    [dict(), dict(stride=2), dict(padding=(0, 3)), dict(dilation=2), dict(groups=2, taps=1,
     padding=(0, 0))],
)  # fmt: skip
def test_numbers_match_the_grouped_1d_convolution(case):
    after = same_numbers_after(GroupedConvolutionsByGroup(), _grouped_module_1d(**case))
    assert "conv1d_by_group" in after.script()


def test_a_depthwise_1d_convolution_stays():
    mod = _grouped_module_1d(groups=4, channels=4)
    tvm.ir.assert_structural_equal(GroupedConvolutionsByGroup()(mod), mod)


def test_an_exported_positional_convolution_gets_the_channel_tile_and_matches(tmp_path):
    torch = pytest.importorskip("torch")
    conv = torch.nn.Conv1d(32, 32, 16, padding=8, groups=4)  # wav2vec 2.0's, smaller
    x = torch.randn(1, 32, 20)
    path = tmp_path / "positions.onnx"
    torch.onnx.export(conv.eval(), (x,), str(path), input_names=["x"], dynamo=False)
    compiled = api.compile(load_model(path), [cpu_device()])
    rules = {k.kernel: k.rule for k in api.kernel_schedules(compiled)}
    assert any("conv1d_by_group" in k and r == "conv" for k, r in rules.items())
    (got,) = api.run(compiled, {"x": x.numpy()})
    np.testing.assert_allclose(got, conv(x).detach().numpy(), rtol=1e-4, atol=1e-5)
