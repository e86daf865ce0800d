"""Matmuls whose rows are known only at run time on one CPU, their rows padded to whole tiles
and skipped by a condition, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/symbolic_rows.py [--runs 30] [--only CASE ...]

A mixture of experts routes each token to a few experts; an export that keeps the routing
(transformers' JetMoE: tokens sorted by expert, then split by counts the graph computes) gives
each expert a matmul over as many rows as tokens it received, a number known only at run time.
Each case takes ``n`` of 256 tokens so (:func:`export_routed_matmul`) and multiplies them by
constant weights ``[K, N]``: JetMoE's expert shapes (256 -> 1024, 512 -> 256) at row counts
its experts get for 128 tokens, and one to three rows (a tile computes four). Compiled for the
whole CPU with the rows padded to whole tiles (``now``) and with the last tile's rows skipped
by a condition (``before``, ``matmul.PADDED_SYMBOLIC_ROWS`` off), run by our executor beside
ONNX Runtime on the same cores, threads and input in interleaved rounds (medians); outputs
checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/symbolic_rows.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command, module_switch  # noqa: E402

TOKENS = 256
"""The tokens of each case's input, of which the case's rows are routed to the matmul."""
CASES = {  # name: (rows at run time, depth K, columns N)
    f"{n} x {k} @ {k} x {c}": (n, k, c)
    for n, k, c in [(1, 256, 1024), (3, 256, 1024), (17, 256, 1024), (62, 256, 1024),
                    (90, 256, 1024), (90, 512, 256), (200, 256, 1024)]
}  # fmt: skip


def export_routed_matmul(case: tuple[int, int, int], path: Path) -> np.ndarray:
    """The first rows of ``x[TOKENS, K]``, as many as have a positive first value (a count the
    graph computes, then ``Split`` by it: JetMoE's routing, tokens sorted by expert), times
    constant ``w[K, N]``: a matmul whose row count is known only at run time. Written to
    ``path``; returns an ``x`` of which the case's rows are taken."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rows, depth, columns = case
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((depth, columns)) / np.sqrt(depth)).astype("float32")
    nodes = [
        helper.make_node("Gather", ["x", "first"], ["lead"], axis=1),
        helper.make_node("Greater", ["lead", "zero"], ["chosen"]),
        helper.make_node("Cast", ["chosen"], ["ones"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["ones", "axis0"], ["count"], keepdims=1),
        helper.make_node("Sub", ["tokens", "count"], ["others"]),
        helper.make_node("Concat", ["count", "others"], ["sizes"], axis=0),
        helper.make_node("Split", ["x", "sizes"], ["routed", "rest"], axis=0),
        helper.make_node("MatMul", ["routed", "w"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.int64(0), "first"),
        numpy_helper.from_array(np.float32(0), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([TOKENS], np.int64), "tokens"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "routed_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [TOKENS, depth])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", columns])], constants,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    x = rng.standard_normal((TOKENS, depth)).astype("float32")
    x[:, 0] = np.where(np.arange(TOKENS) < rows, 1.0, -1.0)
    return x


def main() -> int:
    off = module_switch("tvm_hetero.schedules.cpu.matmul", "PADDED_SYMBOLIC_ROWS", False)
    return case_command(__doc__, CASES, export_routed_matmul, off, "symbolic_rows.jsonl")


if __name__ == "__main__":
    sys.exit(main())
