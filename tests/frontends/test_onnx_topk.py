"""ONNX ``TopK`` unsorted (a mixture of experts' picks of groups): ONNX Runtime's picks."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model

ort = pytest.importorskip("onnxruntime")


def test_an_unsorted_topk_gives_onnx_runtimes_picks_sorted(tmp_path):
    """ONNX leaves an unsorted TopK's order open; the picks are ONNX Runtime's, sorted."""
    path = tmp_path / "topk.onnx"
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1, sorted=0)],
        "topk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, [4, 3])],
        [helper.make_tensor("k", TensorProto.INT64, [1], [3])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    x = np.random.default_rng(0).standard_normal((4, 16)).astype("float32")
    values, indices = api.run(api.compile(load_model(path), [cpu_device()]), {"x": x})
    want_values, want_indices = ort.InferenceSession(str(path)).run(None, {"x": x})
    order = np.argsort(-want_values, axis=1)
    np.testing.assert_array_equal(values, np.take_along_axis(want_values, order, axis=1))
    np.testing.assert_array_equal(indices, np.take_along_axis(want_indices, order, axis=1))
