import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.frontends import ModelLoadError, UnsupportedOperatorError, load_model
from tvm_hetero.zoo import UnknownModelError


def _run(model, inputs, device):
    return api.reference_outputs(model, inputs, device)


def _onnx_conv_model(path, batch="N"):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype("float32"), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])], [w, b],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return rng.standard_normal((4, 3, 3, 3)).astype("float32")


def _conv_reference(x, w, b):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0], 8, 8), "float32")
    for i in range(8):
        for j in range(8):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i : i + 3, j : j + 3], w)
    return np.maximum(out + b[None, :, None, None], 0)


def test_onnx_with_symbolic_batch_and_given_shape(tmp_path, two_cpus):
    path = tmp_path / "conv.onnx"
    _onnx_conv_model(path)
    dynamic = load_model(path)
    assert dynamic.inputs[0].shape[0] == "N"
    model = load_model(path, shapes={"x": (2, 3, 8, 8)})
    assert model.inputs[0].shape == (2, 3, 8, 8) and model.source.startswith("onnx:")
    proto = onnx.load(path)
    w = numpy_helper.to_array(proto.graph.initializer[0])
    b = numpy_helper.to_array(proto.graph.initializer[1])
    x = model.random_inputs()
    np.testing.assert_allclose(
        _run(model, x, two_cpus[0])[0], _conv_reference(x["x"], w, b), rtol=1e-4, atol=1e-4
    )


def test_onnx_unsupported_operator_is_named(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"])], "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    path = tmp_path / "det.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    with pytest.raises(UnsupportedOperatorError, match="not supported for frontend ONNX: Det"):
        load_model(path)


def test_onnx_input_nothing_defines_is_named(tmp_path):
    """ONNX Runtime refuses such a file; the message says which node reads what."""
    graph = helper.make_graph(
        [helper.make_node("Clip", ["x", "low", "high"], ["y"], name="clip_1")], "clip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("low", TensorProto.FLOAT, [], [0.0])],
    )  # fmt: skip
    path = tmp_path / "clip.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelLoadError, match=r"input 'high' of node 'clip_1' \(Clip\) is no "):
        load_model(path)


def test_torch_export_program_and_pt2_file(tmp_path, two_cpus):
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(8, 16)
            self.fc2 = torch.nn.Linear(16, 4)

        def forward(self, x):
            return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)

    torch.manual_seed(0)
    net = Net().eval()
    example = (torch.randn(3, 8),)
    expected = net(*example).detach().numpy()
    model = load_model(net, example_args=example)
    feed = {model.inputs[0].name: example[0].numpy()}
    np.testing.assert_allclose(_run(model, feed, two_cpus[0])[0], expected, rtol=1e-5, atol=1e-6)

    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(net, example), str(path))
    from_file = load_model(path)
    np.testing.assert_allclose(
        _run(from_file, feed, two_cpus[0])[0], expected, rtol=1e-5, atol=1e-6
    )


def test_relax_nn_module_with_spec(two_cpus):
    from tvm.relax.frontend import nn

    class Scale(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(4, 4, bias=False)

        def forward(self, x):
            return nn.op.relu(self.fc(x))

    model = load_model(Scale(), spec={"x": ((2, 4), "float32")})
    assert [i.name for i in model.inputs] == ["x"]
    out = _run(model, model.random_inputs(), two_cpus[0])[0]
    assert out.shape == (2, 4) and (out >= 0).all()


SCRIPT = """
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2, 3), "float32"), y: R.Tensor((2, 3), "float32")):
        with R.dataflow():
            z = R.multiply(R.add(x, y), x)
            R.output(z)
        return z
"""


def test_tvmscript_file(tmp_path, two_cpus):
    path = tmp_path / "model.py"
    path.write_text(SCRIPT)
    model = load_model(path)
    feed = model.random_inputs()
    np.testing.assert_allclose(
        _run(model, feed, two_cpus[0])[0], (feed["x"] + feed["y"]) * feed["x"], rtol=1e-6
    )
    printed = tmp_path / "printed.py"  # the text `mod.script()` prints also loads
    printed.write_text(model.mod.script())
    import tvm

    tvm.ir.assert_structural_equal(load_model(printed).mod, model.mod)


def test_bad_sources(tmp_path):
    with pytest.raises(UnknownModelError, match="unknown model 'bert-gigantic'"):
        load_model("bert-gigantic")
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "missing.onnx")
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match="cannot tell the format"):
        load_model(tmp_path / "weights.bin")
    (tmp_path / "broken.onnx").write_bytes(b"not onnx")
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        load_model(tmp_path / "broken.onnx")
    (tmp_path / "broken.py").write_text("x = 1\n")
    with pytest.raises(
        ModelLoadError, match=r"TVMScript must define an IRModule|not a valid TVMScript"
    ):
        load_model(tmp_path / "broken.py")
    from tvm.relax.frontend import nn

    with pytest.raises(ModelLoadError, match="needs spec"):
        load_model(nn.Linear(2, 2))


@I.ir_module
class Identity:
    @R.function
    def main(x: R.Tensor((2,), "float32")):
        return x


def test_a_name_is_kept_and_zoo_settings_are_refused_elsewhere(tmp_path):
    assert load_model(Identity).name == "irmodule"
    assert load_model(Identity, name="identity").name == "identity"
    assert load_model("mlp:tiny", name="small-mlp").name == "small-mlp"
    with pytest.raises(ModelLoadError, match=r"settings \['batch'\] apply to zoo models only"):
        load_model(Identity, batch=4)
    with pytest.raises(ModelLoadError, match="apply to zoo models only"):
        load_model(tmp_path / "model.onnx", batch=4)


def test_weight_bytes_counts_each_bound_constant_once():
    from tvm import relax

    from tvm_hetero.frontends.model import Model

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 4), "float32"))
    w = relax.const(np.ones((4, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.matmul(x, w))
            y = bb.emit(relax.op.matmul(y, w))  # the same weight again
            y = bb.emit(relax.op.add(y, relax.const(np.ones(4, "float64").astype("float32"))))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    model = Model("m", bb.get(), (), "test")
    assert model.weight_bytes() == 4 * 4 * 4 + 4 * 4
