"""ONNX ``DFT`` imported as products with constant cos / sin matrices."""

import numpy as np
import onnx
import pytest
from conftest import op_calls
from onnx import TensorProto, helper, numpy_helper
from tvm.ir.expr import Constant

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import UnsupportedOperatorError, load_model
from tvm_hetero.frontends.onnx_dft import dft_matrices

ort = pytest.importorskip("onnxruntime")


def _dft_model(path, shape, opset, axis, length=None, **attrs):
    """One ``DFT`` node over ``X`` of ``shape`` (axis an attribute at opset 17, an input at
    20); returns a random ``X``."""
    inits, names = [], ["X", ""]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, "int64"), "L"))
        names[1] = "L"
    if opset == 17:
        attrs["axis"] = axis
    else:
        inits.append(numpy_helper.from_array(np.array(axis, "int64"), "A"))
        names.append("A")
    graph = helper.make_graph(
        [helper.make_node("DFT", names, ["Y"], **attrs)], "dft",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    onnx.save(model, str(path))
    concrete = [2 if isinstance(d, str) else d for d in shape]
    return np.random.default_rng(0).standard_normal(concrete).astype("float32")


@pytest.mark.parametrize(
    ("shape", "opset", "axis", "length", "attrs"),
    [
        ([1, 8, 6, 1], 17, 1, None, {}),  # real
        ([1, 8, 6, 2], 17, 2, None, {}),  # complex, the other axis
        ([1, 8, 6, 2], 20, -2, None, {}),  # the axis an input, counted from the end
        ([1, 8, 6, 2], 20, 1, None, {"inverse": 1}),
        ([1, 8, 6, 1], 20, 1, None, {"onesided": 1}),
        ([1, 8, 6, 1], 20, 1, 12, {}),  # zero-padded
        ([1, 8, 6, 2], 20, 1, 5, {}),  # trimmed
        ([2, 8, 6, 2], 17, 0, None, {}),
    ],
)  # fmt: skip
def test_dft_matches_onnx_runtime(tmp_path, shape, opset, axis, length, attrs):
    path = tmp_path / "dft.onnx"
    x = _dft_model(path, shape, opset, axis, length, **attrs)
    want = ort.InferenceSession(str(path)).run(None, {"X": x})[0]
    got = api.run(api.compile(load_model(path), [cpu_device()]), {"X": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_dft_of_a_torch_fft_matches_torch(tmp_path):
    """FNet's token mixing: ``fftn`` over tokens and channels, its real part."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")  # the dynamo exporter's (a benchmark dependency)

    class Mix(torch.nn.Module):
        def forward(self, x):
            return torch.fft.fftn(x, dim=(1, 2)).real

    x = torch.randn(1, 16, 24)
    path = tmp_path / "fft.onnx"
    torch.onnx.export(Mix(), (x,), str(path), dynamo=True, verbose=False)
    assert "DFT" in {n.op_type for n in onnx.load(str(path)).graph.node}
    got = api.run(api.compile(load_model(path), [cpu_device()]), {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, Mix()(x).numpy(), rtol=1e-4, atol=1e-4)


def test_dft_is_matmuls_with_constant_matrices(tmp_path):
    """A complex transform: both parts taken, moved to the last axis, four products (real and
    imaginary parts against cos and sin), combined, moved back and stacked."""
    path = tmp_path / "dft.onnx"
    _dft_model(path, [1, 8, 6, 2], 17, 1)
    calls = op_calls(load_model(path).mod)
    names = [c.op.name for c in calls]
    assert names.count("relax.matmul") == 4 and names[-1] == "relax.stack"
    assert "relax.fft" not in " ".join(names)
    constants = [a for c in calls if c.op.name == "relax.matmul" for a in c.args
                 if isinstance(a, Constant)]  # fmt: skip
    assert len(constants) == 4 and all(tuple(a.value.numpy().shape) == (8, 8) for a in constants)


@pytest.mark.parametrize(
    ("signal", "length", "onesided"), [(8, 8, False), (6, 10, True), (9, 4, False)]
)
def test_dft_matrices_are_numpy_fft(signal, length, onesided):
    """``x @ C - i x @ S``... as the function says, against ``numpy.fft`` (forward and
    inverse), with padding and trimming."""
    x = np.random.default_rng(1).standard_normal(signal) + 1j * np.random.default_rng(
        2
    ).standard_normal(signal)
    outputs = length // 2 + 1 if onesided else length
    for inverse, fft in ((False, np.fft.fft), (True, np.fft.ifft)):
        if inverse and onesided:
            continue
        c, s = dft_matrices(signal, length, outputs, inverse, "float64")
        used = x[:length]
        got = used.real @ c - used.imag @ s + 1j * (used.imag @ c + used.real @ s)
        np.testing.assert_allclose(got, fft(x, n=length)[:outputs], atol=1e-9)


@pytest.mark.parametrize(
    ("shape", "attrs", "said"),
    [
        ([1, 8, 6, 3], {}, "last axis must be 1"),
        ([1, 8, 6, 1], {"inverse": 1, "onesided": 1}, "onesided with inverse"),
        (["N", 8, 6, 1], {}, None),  # a symbolic batch is fine; the signal is known
    ],
)
def test_dft_it_cannot_build_is_refused_naming_why(tmp_path, shape, attrs, said):
    path = tmp_path / "dft.onnx"
    _dft_model(path, shape, 17, 1, **attrs)
    if said is None:
        assert load_model(path).inputs[0].shape[0] == "N"
        return
    with pytest.raises(UnsupportedOperatorError, match=said):
        load_model(path)


def test_dft_over_a_symbolic_signal_is_refused(tmp_path):
    path = tmp_path / "dft.onnx"
    _dft_model(path, [1, "T", 6, 1], 17, 1)
    with pytest.raises(UnsupportedOperatorError, match="DFT: the signal's length must be known"):
        load_model(path)
