"""The IR builder's ``pragma_scope`` dropped from TIR: same statements, no attribute."""

import tvm
from tvm.script import tirx as T

from tvm_hetero.ir.builder_scopes import module_without_seq_scopes, without_seq_scopes


@T.prim_func(s_tir=True)
def _before(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    with T.sblock("root"):
        T.reads()
        T.writes()
        with T.sblock("copy"):
            T.reads(a[0:4])
            T.writes(b[0:4])
            T.attr(0, "pragma_scope", "seq")
            for i in range(4):
                b[i] = a[i]
            for i in range(2):
                b[i] = a[i] + T.float32(1)


@T.prim_func(s_tir=True)
def _expected(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    with T.sblock("root"):
        T.reads()
        T.writes()
        with T.sblock("copy"):
            T.reads(a[0:4])
            T.writes(b[0:4])
            for i in range(4):
                b[i] = a[i]
            for i in range(2):
                b[i] = a[i] + T.float32(1)


def _named(func):
    return func.with_attr("global_symbol", "main")


def test_the_seq_scope_is_dropped_and_its_statements_kept():
    assert "pragma_scope" in _before.script()
    tvm.ir.assert_structural_equal(_named(without_seq_scopes(_before)), _named(_expected))


def test_a_function_without_one_is_returned_as_it_is():
    assert without_seq_scopes(_expected) is _expected
    mod = tvm.IRModule({"main": _expected})
    assert module_without_seq_scopes(mod) is mod


def test_a_module_keeps_its_other_functions_and_infos():
    mod = tvm.IRModule({"main": _before, "other": _expected})
    out = module_without_seq_scopes(mod)
    tvm.ir.assert_structural_equal(_named(out["main"]), _named(_expected))
    assert out["other"].same_as(_expected)


def test_a_model_scattering_its_input_builds_without_codegen_noise(tmp_path, capfd):
    """An ONNX ``ScatterND`` into the model's input (not foldable): its kernel keeps topi's
    statements, built without "Unknown pragma" on stderr; numbers equal numpy's."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model

    rows = np.array([[5], [2]], "int64")
    updates = np.arange(6, dtype="float32").reshape(2, 3) + 1
    graph = helper.make_graph(
        [helper.make_node("ScatterND", ["x", "rows", "updates"], ["y"])],
        "scatter",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (8, 3))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (8, 3))],
        [numpy_helper.from_array(rows, "rows"), numpy_helper.from_array(updates, "updates")],
    )
    path = tmp_path / "scatter.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)
    capfd.readouterr()
    compiled = api.compile(load_model(str(path)), [resolve_device("cpu")])
    assert "pragma" not in capfd.readouterr().err
    x = np.random.default_rng(0).standard_normal((8, 3)).astype("float32")
    expected = x.copy()
    expected[[5, 2]] = updates
    np.testing.assert_array_equal(api.run(compiled, {"x": x})[0], expected)
