"""Ids into a table: refused before the run when out of range, never read outside it."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.index_bounds import index_bounds

ort = pytest.importorskip("onnxruntime")
TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)


def _gather(path, scale=None):
    """``Gather(table, ids)`` on axis 0; with ``scale`` the ids are multiplied by it first (ids
    the model computes, which no input check sees)."""
    nodes, ids = [], "ids"
    inits = [numpy_helper.from_array(TABLE, "table")]
    if scale is not None:
        inits.append(numpy_helper.from_array(np.array(scale, dtype=np.int64), "scale"))
        nodes.append(helper.make_node("Mul", ["ids", "scale"], ["scaled"]))
        ids = "scaled"
    nodes.append(helper.make_node("Gather", ["table", ids], ["y"], axis=0))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)  # fmt: skip
    return path


def test_onnx_gather_input_gets_the_table_bounds(tmp_path):
    model = load_model(_gather(tmp_path / "g.onnx"))
    (spec,) = model.inputs
    assert (spec.low, spec.high) == (-10, 10)
    assert index_bounds(model.mod["main"]) == {"ids": 10}


def test_computed_ids_are_not_input_bounds(tmp_path):
    model = load_model(_gather(tmp_path / "g.onnx", scale=3))
    assert model.inputs[0].high is None


def test_negative_ids_keep_onnx_meaning(tmp_path):
    path = _gather(tmp_path / "g.onnx")
    ids = np.array([0, -1, -10], dtype=np.int64)
    (got,) = api.run(api.compile(load_model(path), [cpu_device()]), {"ids": ids})
    (want,) = ort.InferenceSession(str(path)).run(None, {"ids": ids})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bad", [10, -11, 10**12])
def test_id_outside_the_table_is_refused_naming_input_value_and_range(tmp_path, bad):
    compiled = api.compile(load_model(_gather(tmp_path / "g.onnx")), [cpu_device()])
    with pytest.raises(
        ValueError,
        match=rf"input 'ids': id {bad} is outside its table of 10 rows \(allowed -10 .. 9\)",
    ):
        api.run(compiled, {"ids": np.array([0, bad, 1], dtype=np.int64)})


def test_computed_id_past_the_table_wraps_instead_of_reading_other_memory(tmp_path):
    compiled = api.compile(load_model(_gather(tmp_path / "g.onnx", scale=10**11)), [cpu_device()])
    ids = np.array([1, 2, -3], dtype=np.int64)
    (got,) = api.run(compiled, {"ids": ids})
    np.testing.assert_array_equal(got, TABLE[(ids * 10**11) % len(TABLE)])  # np.take wraps slowly


def test_run_refuses_with_exit_2_and_one_line(tmp_path):
    artifact = api.compile(load_model(_gather(tmp_path / "g.onnx")), [cpu_device()]).save(
        tmp_path / "g.tar"
    )
    np.savez(tmp_path / "bad.npz", ids=np.array([0, 10**12, 1], dtype=np.int64))
    cmd = [sys.executable, "-m", "tvm_hetero.cli.main", "run", str(artifact), "--inputs",
           str(tmp_path / "bad.npz")]  # fmt: skip
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200"} | dict(__import__("os").environ),
    )
    assert done.returncode == 2, done.stderr
    text = (done.stdout + done.stderr).strip()
    assert "Traceback" not in text
    assert "id 1000000000000 is outside its table of 10 rows" in " ".join(text.split())


@pytest.mark.parametrize(
    ("shape", "words"), [([3, 1], "2 dimensions given, the input has 1"), ([4], "fixed at 3")]
)
def test_input_shape_names_symbolic_dimensions_only(tmp_path, shape, words):
    from tvm_hetero.frontends import ModelLoadError

    with pytest.raises(ModelLoadError, match=words):
        load_model(_gather(tmp_path / "g.onnx"), shapes={"ids": shape})


def _indexing(path, op, data_shape, ids_shape, **attrs):
    """``op(data, ids)`` (with zero ``updates`` for a scatter) over an ``arange`` initializer."""
    data = np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape)
    inits = [numpy_helper.from_array(data, "data")]
    args = ["data", "ids"]
    if op.startswith("Scatter"):
        updates = ids_shape[:-1] + data_shape[ids_shape[-1] :] if op == "ScatterND" else ids_shape
        inits.append(numpy_helper.from_array(np.zeros(updates, np.float32), "updates"))
        args.append("updates")
    graph = helper.make_graph(
        [helper.make_node(op, args, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ids_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)  # fmt: skip
    return path


INDEXING = {
    "GatherElements": (([4, 5], [4, 2]), {"axis": 1}, 5),
    "ScatterElements": (([4, 5], [4, 2]), {"axis": 1}, 5),
    "GatherND": (([6, 6, 2], [3, 2]), {}, 6),
    "ScatterND": (([6, 3], [2, 1]), {}, 6),
}


@pytest.mark.parametrize("op", sorted(INDEXING))
def test_gather_and_scatter_ids_get_their_bounds_and_match_onnx_runtime(tmp_path, op):
    (shapes, attrs, rows) = INDEXING[op]
    path = _indexing(tmp_path / "m.onnx", op, *shapes, **attrs)
    model = load_model(path)
    assert (model.inputs[0].low, model.inputs[0].high) == (-rows, rows)
    compiled = api.compile(model, [cpu_device()])
    # negative ids too; a scatter's targets distinct (ONNX leaves duplicates undefined)
    ids = (np.arange(np.prod(shapes[1])) * 7 % (2 * rows) - rows).reshape(shapes[1])
    (got,) = api.run(compiled, {"ids": ids})
    (want,) = ort.InferenceSession(str(path)).run(None, {"ids": ids})
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=rf"id {rows} is outside its table of {rows} rows"):
        api.run(compiled, {"ids": np.full(shapes[1], rows, dtype=np.int64)})


def test_index_tuples_over_unequal_extents_only_wrap(tmp_path):
    model = load_model(_indexing(tmp_path / "m.onnx", "GatherND", [6, 4], [3, 2]))
    assert model.inputs[0].high is None
