"""PadMatmulColumns: constant CPU matmul weights widened to whole panels, the result cropped."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.passes import PadMatmulColumns

HASWELL = {"kind": "llvm", "mcpu": "haswell"}  # 8 lanes: 61 columns are padded to 64
W = np.random.default_rng(0).standard_normal((32, 61)).astype("float32")


def _module(weight, transposed=False, device=HASWELL):
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType((4, 32), "float32", vdev))
    params = [x]
    bb = relax.BlockBuilder()
    if isinstance(weight, np.ndarray):
        w = relax.const(weight.T.copy() if transposed else weight)
    else:
        w = relax.Var("w", relax.TensorType(weight, "float32", vdev))
        params.append(w)
    with bb.function("main", params):
        with bb.dataflow():
            if transposed:
                w = bb.emit(relax.op.permute_dims(w))
            y = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def _run(mod, x):
    mod = relax.transform.LegalizeOps()(mod)
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("transposed", [False, True], ids=["k_n", "gemm_transb"])
def test_weight_is_padded_once_and_the_result_cropped(transposed):
    before = _module(W, transposed)
    text = before.script()
    after = PadMatmulColumns()(before)
    assert before.script() == text  # the input is not mutated
    *_, matmul, crop = after["main"].body.blocks[0].bindings
    padded = matmul.value.args[1].value.numpy()
    assert padded.shape == (32, 64)
    np.testing.assert_array_equal(padded[:, :61], W)
    np.testing.assert_array_equal(padded[:, 61:], 0)
    assert crop.value.op.name == "relax.strided_slice"
    assert [int(d) for d in crop.var.ty.shape.values] == [4, 61]
    x = np.random.default_rng(1).standard_normal((4, 32)).astype("float32")
    np.testing.assert_allclose(_run(after, x), x @ W, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "mod",
    [
        _module((32, 61)),  # not a constant
        _module(W[:, :48].copy()),  # 48 columns: whole panels already
        _module(W, device={"kind": "cuda", "arch": "sm_80"}),
    ],
    ids=["variable_weight", "whole_panels", "cuda_vdevice"],
)
def test_variables_whole_panels_and_gpus_stay(mod):
    tvm.ir.assert_structural_equal(PadMatmulColumns()(mod), mod)


def test_tensors_without_a_vdevice_are_on_the_home_device():
    x = relax.Var("x", relax.TensorType((4, 32), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(x, relax.const(W)))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [VDevice(make_target(HASWELL), 0, "global")])
    assert "strided_slice" in PadMatmulColumns()(mod).script()


def _pointwise_module(channels=20, side=1, stride=1, padded=None):
    """``relu(conv2d(x, V))`` 1x1 over a ``side`` x ``side`` map, ``V`` constant; with
    ``padded`` channels its widened form, ``relu(strided_slice(conv2d(x, V'), [1], [0],
    [channels]))``, ``V'`` ``V`` with zero output channels up to ``padded``."""
    vdev = VDevice(make_target(HASWELL), 0, "global")
    x = relax.Var("x", relax.TensorType((1, 32, side, side), "float32", vdev))
    weights = np.random.default_rng(2).standard_normal((channels, 32, 1, 1)).astype("float32")
    stored = weights
    if padded is not None:
        stored = np.concatenate([weights, np.zeros((padded - channels, 32, 1, 1), "float32")])
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(stored), stride))
            if padded is not None:
                y = bb.emit(relax.op.strided_slice(y, axes=[1], begin=[0], end=[channels]))
            y = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod, weights


def test_a_pointwise_convolution_over_a_1x1_map_gets_whole_panels_of_channels():
    """A squeeze-excite step's 1x1 convolution (20 output channels; with 8 lanes, 32): its
    weights get zero output channels once, the output is cropped to the 20 before the ReLU, and
    the numbers are the unpadded convolution's."""
    before, weights = _pointwise_module()
    after = PadMatmulColumns()(before)
    conv, crop, relu = after["main"].body.blocks[0].bindings
    padded = conv.value.args[1].value.numpy()
    assert padded.shape == (32, 32, 1, 1)
    np.testing.assert_array_equal(padded[:20], weights)
    np.testing.assert_array_equal(padded[20:], 0)
    assert crop.value.op.name == "relax.strided_slice" and relu.value.args[0].same_as(crop.var)
    assert [int(d) for d in crop.var.ty.shape.values] == [1, 20, 1, 1]
    x = np.random.default_rng(3).standard_normal((1, 32, 1, 1)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("channels", "side"), [(32, 1), (20, 7)], ids=["whole_panels", "larger_map"]
)
def test_other_pointwise_convolutions_stay(channels, side):
    mod, _ = _pointwise_module(channels, side)
    tvm.ir.assert_structural_equal(PadMatmulColumns()(mod), mod)


def test_channels_one_vector_divides_are_widened_to_two_over_a_small_map():
    """72 output channels over 14 x 14 with 8 lanes: the matmul rule takes the channels as its
    columns (196 positions are no whole vectors), and one vector divides 72 where two do not
    (a tile of 8 multiply-adds for 9 loads); widened to 80 (an eighth more at most), cropped
    after, the numbers unchanged."""
    (before, _), (expected, _) = _pointwise_module(72, 14), _pointwise_module(72, 14, padded=80)
    after = PadMatmulColumns()(before)
    tvm.ir.assert_structural_equal(after, expected)
    x = np.random.default_rng(5).standard_normal((1, 32, 14, 14)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-5)


def test_channels_no_vector_divides_are_widened_to_two_vectors_too(monkeypatch):
    """124 output channels over 14 x 14 with 8 lanes (no vector divides them): widened to 128
    (a thirtieth more) and cropped after, the numbers unchanged; with
    :data:`PART_VECTOR_CHANNELS` off they stay (the matmul rule then takes the positions as its
    columns, padded to whole vectors and copied on every call)."""
    import tvm_hetero.passes.pad_matmul_columns as pass_module

    (before, _), (expected, _) = _pointwise_module(124, 14), _pointwise_module(124, 14, padded=128)
    after = PadMatmulColumns()(before)
    tvm.ir.assert_structural_equal(after, expected)
    x = np.random.default_rng(5).standard_normal((1, 32, 14, 14)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(pass_module, "PART_VECTOR_CHANNELS", False)
    tvm.ir.assert_structural_equal(PadMatmulColumns()(before), before)


@pytest.mark.parametrize(
    ("channels", "side"),
    [(72, 28), (24, 14), (68, 14)],
    ids=["positions_are_the_columns", "over_an_eighth", "no_whole_vector_over_an_eighth"],
)
def test_channels_stay_where_widening_does_not_apply(channels, side):
    mod, _ = _pointwise_module(channels, side)
    tvm.ir.assert_structural_equal(PadMatmulColumns()(mod), mod)


def test_widening_can_be_switched_off(monkeypatch):
    import tvm_hetero.passes.pad_matmul_columns as pass_module

    monkeypatch.setattr(pass_module, "WIDE_PANELS", False)
    mod, _ = _pointwise_module(72, 14)
    tvm.ir.assert_structural_equal(PadMatmulColumns()(mod), mod)
