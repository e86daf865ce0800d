"""ONNX ``Split`` by sizes known at run time (a mixture of experts' routed rows), and ``Expand``
of what it makes: the IR they become, and numbers for several sizes from one build."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model

ort = pytest.importorskip("onnxruntime")


def _routed_rows(path) -> None:
    """``x`` (6 x 4) split along its rows by ``sizes`` (3 at run time); the first piece summed,
    the second's first column expanded to 4 columns and summed, the third's maximum: 3 x 4; and
    the pieces concatenated again (6 x 4)."""
    constants = {"axis0": [0], "start": [0], "end": [1], "axis1": [1], "shape": [1, 4]}
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["p0", "p1", "p2"], axis=0),
        helper.make_node("ReduceSum", ["p0", "axis0"], ["s0"], keepdims=1),
        helper.make_node("Slice", ["p1", "start", "end", "axis1"], ["q1"]),
        helper.make_node("Expand", ["q1", "shape"], ["e1"]),
        helper.make_node("ReduceSum", ["e1", "axis0"], ["s1"], keepdims=1),
        helper.make_node("ReduceMax", ["p2", "axis0"], ["s2"], keepdims=1),
        helper.make_node("Concat", ["s0", "s1", "s2"], ["y"], axis=0),
        helper.make_node("Concat", ["p0", "p1", "p2"], ["whole"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "routed_rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4]),
         helper.make_tensor_value_info("sizes", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("whole", TensorProto.FLOAT, [6, 4])],
        [helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in constants.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.save(model, path)


def test_split_by_sizes_computed_at_run_time_becomes_slices_of_symbolic_size(tmp_path):
    """The pieces concatenated again have the input's extent (6), not a sum of symbols."""
    _routed_rows(tmp_path / "routed.onnx")
    text = load_model(tmp_path / "routed.onnx").mod["main"].script()
    assert "R.tensor_to_shape(sizes)" in text, text
    assert "R.Shape([split_0, split_1, split_2])" in text, text
    slices = [line for line in text.splitlines() if "= R.strided_slice(x, (0,)" in line]
    sizes = ["split_0", "split_1", "6 - split_0 - split_1"]  # the last: to the end of the axis
    assert [line.split(": ")[1].split(" =")[0] for line in slices] == [
        f'R.Tensor(({size}, 4), dtype="float32")' for size in sizes
    ], text
    assert "R.broadcast_to(lv5, R.shape([split_1, 4]))" in text, text


@pytest.mark.parametrize("sizes", [[1, 2, 3], [3, 1, 2], [2, 2, 2]])
def test_one_build_gives_onnx_runtimes_numbers_for_each_split(tmp_path, sizes):
    path = tmp_path / "routed.onnx"
    _routed_rows(path)
    compiled = api.compile(load_model(path), [cpu_device()])
    x = np.random.default_rng(0).standard_normal((6, 4)).astype("float32")
    feeds = {"x": x, "sizes": np.array(sizes, "int64")}
    got = api.run(compiled, feeds)
    want = ort.InferenceSession(str(path)).run(None, feeds)
    for ours, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
