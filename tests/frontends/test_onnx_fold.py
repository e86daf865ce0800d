"""Shape arithmetic evaluated before import where TVM's ONNX frontend fails on it, and
``ConstantOfShape`` of an empty shape."""

import numpy as np
import onnx
import pytest
from conftest import op_calls
from onnx import TensorProto, helper, numpy_helper
from tvm.ir.expr import Constant

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import UnsupportedOperatorError, load_model, onnx_fold
from tvm_hetero.frontends.load import _converted

ort = pytest.importorskip("onnxruntime")


def _ints(name, value):
    return numpy_helper.from_array(np.array(value, "int64"), name)


def _model(nodes, inputs, initializers, opset=17):
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        initializers,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _padded_to_eight(batch=1):
    """``Y = Pad(X, pads)`` with the pads computed from ``X``'s shape: ``8 - width`` after the
    last two axes (an export's shape arithmetic)."""
    nodes = [
        helper.make_node("Shape", ["X"], ["s"]),
        helper.make_node("Gather", ["s", "three"], ["w"], axis=0),
        helper.make_node("Sub", ["eight", "w"], ["d"]),
        helper.make_node("Unsqueeze", ["d", "zero"], ["du"]),
        helper.make_node("Concat", ["zeros6", "du", "du"], ["pads"], axis=0),
        helper.make_node("Pad", ["X", "pads"], ["Y"]),
    ]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, 3, 5, 5])
    constants = [_ints("three", 3), _ints("eight", 8), _ints("zero", [0]), _ints("zeros6", [0] * 6)]
    return _model(nodes, [x], constants)


def test_shape_arithmetic_the_frontend_fails_on_is_folded_and_imported(tmp_path, capfd):
    """Folded, imported, equal to ONNX Runtime; TVM's warning about the failed first try's builder is not shown
    (it had been, on stderr, after every such import)."""
    proto = _padded_to_eight()
    with pytest.raises(UnsupportedOperatorError):
        _converted(proto, None, True)  # as exported: the frontend fails
    path = tmp_path / "pad.onnx"
    onnx.save(proto, str(path))
    x = np.random.default_rng(0).standard_normal((1, 3, 5, 5)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"X": x})[0]
    model = load_model(path)
    assert "BlockBuilder" not in capfd.readouterr().err
    got = api.run(api.compile(model, [cpu_device()]), {"X": x})[0]
    assert got.shape == (1, 3, 8, 8)
    np.testing.assert_array_equal(got, want)


def test_folded_keeps_the_nodes_that_read_inputs_and_makes_the_rest_initializers():
    after = onnx_fold.folded(_padded_to_eight())
    assert [n.op_type for n in after.graph.node] == ["Pad"]
    (pads,) = after.graph.initializer
    assert pads.name == "pads"
    assert numpy_helper.to_array(pads).tolist() == [0, 0, 0, 0, 0, 0, 3, 3]


def test_a_shape_not_known_is_not_folded():
    """A symbolic batch: ``Shape(X)`` is not a constant, so nothing is."""
    assert onnx_fold.folded(_padded_to_eight(batch="N")) is None


def _padded_twice():
    """``Y = Pad(Pad(X, p1), p2)``, each pad computed from its input's width through ``Ceil``
    (``ceil(width / 2)`` after the last axis), as EnCodec pads each convolution's input: ONNX's
    shape inference does not evaluate ``Ceil``, so the first pad's output shape, which the
    second pad's arithmetic reads, is known only once the first pads are constants."""
    nodes = []
    for k, (x, y) in enumerate((("X", "P"), ("P", "Y"))):
        nodes += [
            helper.make_node("Shape", [x], [f"s{k}"]),
            helper.make_node("Gather", [f"s{k}", "two"], [f"w{k}"], axis=0),
            helper.make_node("Cast", [f"w{k}"], [f"f{k}"], to=TensorProto.FLOAT),
            helper.make_node("Div", [f"f{k}", "half"], [f"h{k}"]),
            helper.make_node("Ceil", [f"h{k}"], [f"c{k}"]),
            helper.make_node("Cast", [f"c{k}"], [f"n{k}"], to=TensorProto.INT64),
            helper.make_node("Unsqueeze", [f"n{k}"], [f"u{k}"]),
            helper.make_node("Concat", ["zeros5", f"u{k}"], [f"pads{k}"], axis=0),
            helper.make_node("Pad", [x, f"pads{k}"], [y]),
        ]
        nodes[-3].input.append("zero")  # Unsqueeze's axes
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 5])
    half = numpy_helper.from_array(np.array(2.0, "float32"), "half")
    return _model(nodes, [x], [_ints("two", 2), _ints("zero", [0]), _ints("zeros5", [0] * 5),
                               half])  # fmt: skip


def test_shape_arithmetic_after_a_folded_pad_is_folded_in_a_later_pass(tmp_path, monkeypatch):
    """One pass folds the first pads alone (the second's read the padded shape, unknown until
    then); :func:`onnx_fold.folded` passes again to a fixed point, and the model imports and
    equals ONNX Runtime (width 5, padded by 3 to 8, then by 4 to 12)."""
    proto = _padded_twice()
    once = onnx_fold._folded_once(proto)
    assert [n.op_type for n in once.graph.node].count("Pad") == 2
    assert "Shape" in [n.op_type for n in once.graph.node]  # the second pads' arithmetic
    after = onnx_fold.folded(proto)
    assert [n.op_type for n in after.graph.node] == ["Pad", "Pad"]
    monkeypatch.setattr(onnx_fold, "MOST_PASSES", 1)
    assert "Shape" in [n.op_type for n in onnx_fold.folded(proto).graph.node]
    monkeypatch.undo()
    path = tmp_path / "twice.onnx"
    onnx.save(proto, str(path))
    x = np.random.default_rng(0).standard_normal((1, 2, 5)).astype("float32")
    want = ort.InferenceSession(str(path)).run(None, {"X": x})[0]
    got = api.run(api.compile(load_model(path), [cpu_device()]), {"X": x})[0]
    assert got.shape == (1, 2, 12)
    np.testing.assert_array_equal(got, want)


def test_random_and_large_values_are_left_to_the_frontend(monkeypatch):
    monkeypatch.setattr(onnx_fold, "MOST_ELEMENTS", 100)
    nodes = [
        helper.make_node("ConstantOfShape", ["big"], ["ones"],
                         value=numpy_helper.from_array(np.ones(1, "float32"))),
        helper.make_node("RandomNormal", [], ["noise"], shape=[2, 2]),
        helper.make_node("ConstantOfShape", ["small"], ["twos"],
                         value=numpy_helper.from_array(np.full(1, 2, "float32"))),
        helper.make_node("Sum", ["ones", "noise", "twos"], ["Y"]),
    ]  # fmt: skip
    after = onnx_fold.folded(_model(nodes, [], [_ints("big", [20, 20]), _ints("small", [2, 2])]))
    assert [n.op_type for n in after.graph.node] == ["ConstantOfShape", "RandomNormal", "Sum"]
    assert "twos" in {t.name for t in after.graph.initializer}


def test_a_model_that_imports_as_it_is_is_not_folded(tmp_path, monkeypatch):
    def refuse(_proto):
        raise AssertionError("folded a model that converts as it is")

    monkeypatch.setattr(onnx_fold, "folded", refuse)
    path = tmp_path / "relu.onnx"
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])
    onnx.save(_model([helper.make_node("Relu", ["X"], ["Y"])], [x], []), str(path))
    assert load_model(path).inputs[0].name == "X"


def _first_half_of_columns():
    """``X[:, : X.shape[1] // 2]``, the bound computed from the shape (Mixtral's batched
    experts cut their gate and up projections so): the frontend converts it, to a slice whose
    output has no shape."""
    nodes = [
        helper.make_node("Shape", ["X"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["width"], axis=0),
        helper.make_node("Div", ["width", "two"], ["half"]),
        helper.make_node("Slice", ["X", "zero", "half", "one"], ["Y"]),
    ]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 8])
    ints = [_ints("one", [1]), _ints("two", [2]), _ints("zero", [0])]
    return _model(nodes, [x], ints)


def test_a_conversion_that_leaves_a_tensor_without_shape_is_folded(tmp_path):
    proto = _first_half_of_columns()
    assert "ndim=2" in _converted(proto, None, True)["main"].script()  # the frontend's
    path = tmp_path / "half.onnx"
    onnx.save(proto, str(path))
    model = load_model(path)
    text = model.mod["main"].script()
    assert "ndim=" not in text and "R.Tensor((4, 4)" in text, text
    x = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    (got,) = api.run(api.compile(model, [cpu_device()]), {"X": x})
    np.testing.assert_array_equal(got, x[:, :4])


def test_a_conversion_that_fails_folded_too_names_the_file_and_the_operator(tmp_path):
    """Pads given at run time cannot be folded: the frontend's first failure, with its
    operator."""
    path = tmp_path / "pad.onnx"
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 5, 5]),
              helper.make_tensor_value_info("pads", TensorProto.INT64, [8])]  # fmt: skip
    onnx.save(_model([helper.make_node("Pad", ["X", "pads"], ["Y"])], inputs, []), str(path))
    with pytest.raises(UnsupportedOperatorError, match=r"pad\.onnx: Pad: Dynamic pads"):
        load_model(path)


def test_constant_of_an_empty_shape_is_a_scalar(tmp_path):
    """``ConstantOfShape`` of a ``[0]`` shape (Longformer's masks): a scalar of the value's
    type, which TVM's converter made a one-element vector and failed to broadcast."""
    value = numpy_helper.from_array(np.full(1, 2.5, "float32"))
    nodes = [helper.make_node("ConstantOfShape", ["empty"], ["c"], value=value),
             helper.make_node("Add", ["X", "c"], ["Y"])]  # fmt: skip
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    path = tmp_path / "scalar.onnx"
    onnx.save(_model(nodes, [x], [numpy_helper.from_array(np.zeros(0, "int64"), "empty")]),
              str(path))  # fmt: skip
    model = load_model(path)
    (add,) = op_calls(model.mod)
    (scalar,) = [a for a in add.args if isinstance(a, Constant)]
    assert scalar.value.numpy().shape == () and float(scalar.value.numpy()) == 2.5
    data = np.arange(6, dtype="float32").reshape(2, 3)
    want = ort.InferenceSession(str(path)).run(None, {"X": data})[0]
    got = api.run(api.compile(model, [cpu_device()]), {"X": data})[0]
    np.testing.assert_array_equal(got, want)


def test_a_symbolic_input_is_named_in_the_error_and_imports_given_a_size(tmp_path):
    """Shape arithmetic from a symbolic batch cannot be evaluated: the error names the input
    and how to give it a size (``--input-shape``); given one, the arithmetic folds with it."""
    path = tmp_path / "pad.onnx"
    onnx.save(_padded_to_eight(batch="N"), str(path))
    with pytest.raises(UnsupportedOperatorError, match=r"input X .*\(Nx3x5x5\).*--input-shape X:"):
        load_model(path)
    model = load_model(path, shapes={"X": [2, 3, 5, 5]})
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype("float32")
    got = api.run(api.compile(model, [cpu_device()]), {"X": x})[0]
    np.testing.assert_array_equal(got, np.pad(x, [(0, 0), (0, 0), (0, 3), (0, 3)]))
