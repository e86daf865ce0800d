"""A corpus model's convolutions each alone against the whole model, ours and ONNX Runtime's:
what each runtime gains or loses by running the layers together (issue 56).

    .venv/bin/python benchmarks/models/layers_alone.py MODEL [--runs 20] [--threads 2]

Exports the model as ``corpus.py`` does, finds its ``Conv`` nodes (shapes by ONNX shape
inference), and builds each distinct convolution (its attributes, input and weight shapes) as a
one-node ONNX file with the first such node's weights. Each is compiled for the CPU as
``api.compile`` does and timed end to end beside ONNX Runtime on the same file, inputs and
threads, interleaved (medians of ``--runs``); then the whole model the same way. Sums weigh
each convolution by how many nodes share it. Alone, a layer's weights and input stay in cache
from one run to the next, and ONNX Runtime converts each one-node model's input to its blocked
channel layout (NCHWc) and back; inside the model neither holds. Compare each runtime's whole
model with its own layers alone (what running them together gains or loses), and the layers'
ratios with care. Prints a table; one JSON line per model in
``benchmarks/results/layers_alone.jsonl``.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "cpu_kernels")]


def convolutions(model) -> list[tuple[tuple, list]]:  # model: onnx.ModelProto
    """``(key, nodes)`` for each distinct ``Conv`` of ``model``, in first-use order: the key is
    its input and weight shapes and attributes, the nodes every node that shares it."""
    import onnx

    model = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*model.graph.value_info, *model.graph.input]}  # fmt: skip
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    found: dict[tuple, list] = collections.OrderedDict()
    for node in model.graph.node:
        if node.op_type != "Conv" or node.input[1] not in weights:
            continue
        attrs = tuple(sorted((a.name, str(onnx.helper.get_attribute_value(a)))
                             for a in node.attribute))  # fmt: skip
        key = (tuple(shapes[node.input[0]]), tuple(weights[node.input[1]]), attrs)
        found.setdefault(key, []).append(node)
    return list(found.items())


def one_node(model, node, shape: tuple, out: Path) -> np.ndarray:
    """``node`` (a ``Conv`` of ``model``, an ``onnx.ModelProto``, whose input has ``shape``) as
    an ONNX file of its own at ``out``, its weights and bias as initializers; returns a seeded
    input for it."""
    import onnx
    from onnx import TensorProto, helper

    inits = {t.name: t for t in model.graph.initializer}
    conv = helper.make_node("Conv", ["x", *node.input[1:]], ["y"], name="conv")
    conv.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [conv], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [inits[name] for name in node.input[1:] if name],
    )  # fmt: skip
    alone = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    onnx.save(onnx.shape_inference.infer_shapes(alone), str(out))  # the output's shape too
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def timed(path: Path, feeds: dict, device, runs: int, shapes=None) -> tuple[float, float]:
    """Microseconds (medians) of the file at ``path`` compiled for ``device`` and of ONNX
    Runtime on it, interleaved."""
    from tvm_hetero import api
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    model = load_model(str(path), shapes=shapes)
    inputs = [feeds[i.name] for i in model.inputs]
    compiled = api.compile(model, [device])
    ours, theirs = interleaved_run_seconds(
        [compiled.deployment], [runs], peers=[OnnxRuntimePeer(path, device, inputs)]
    )
    return 1e6 * float(np.median(ours)), 1e6 * float(np.median(theirs))


def main() -> int:
    import onnx
    from onnx_models import append_rows
    from stamp import stamp
    from zoo import CORPUS, exported_feeds

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(CORPUS), metavar="MODEL")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from tvm_hetero.devices import cpu_device

    device = cpu_device(threads=args.threads)
    rows, ours_sum, theirs_sum = [], 0.0, 0.0
    print(f"{'convolution (input, weights)':44} {'n':>3} {'ours us':>8} {'ORT us':>8} ratio")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.model}.onnx"
        given, feeds = exported_feeds(args.model, path)
        model = onnx.load(str(path))  # read once: ResNet-50's weights are 100 MB
        for k, (key, nodes) in enumerate(convolutions(model)):
            alone = Path(tmp) / f"conv{k}.onnx"
            x = one_node(model, nodes[0], key[0], alone)
            ours, theirs = timed(alone, {"x": x}, device, args.runs)
            ours_sum, theirs_sum = ours_sum + len(nodes) * ours, theirs_sum + len(nodes) * theirs
            name = f"{'x'.join(map(str, key[0]))} {'x'.join(map(str, key[1]))}"
            rows.append({"convolution": name, "count": len(nodes), "ours_us": ours,
                         "ort_us": theirs})  # fmt: skip
            print(f"{name[:44]:44} {len(nodes):3} {ours:8.0f} {theirs:8.0f} {ours / theirs:5.2f}x",
                  flush=True)  # fmt: skip
        whole_ours, whole_theirs = timed(path, feeds, device, args.runs, given)
    print(
        f"convolutions alone, summed: ours {ours_sum / 1e3:.1f} ms, ONNX Runtime "
        f"{theirs_sum / 1e3:.1f} ms ({ours_sum / theirs_sum:.2f}x)"
    )
    print(f"whole model:                ours {whole_ours / 1e3:.1f} ms, ONNX Runtime "
          f"{whole_theirs / 1e3:.1f} ms ({whole_ours / whole_theirs:.2f}x)")  # fmt: skip
    append_rows([{**stamp(), "model": args.model, "threads": device.threads,
                  "layers_ours_ms": ours_sum / 1e3, "layers_ort_ms": theirs_sum / 1e3,
                  "whole_ours_ms": whole_ours / 1e3, "whole_ort_ms": whole_theirs / 1e3,
                  "layers": rows}], "layers_alone.jsonl")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
