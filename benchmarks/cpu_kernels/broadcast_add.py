"""Element-wise kernels on odd row widths: the CPU rules against TVM's default loops and ONNX
Runtime (issue 14's "fix the rule": vectors cut across rows made odd widths up to 4.8x slower).

    .venv/bin/python benchmarks/cpu_kernels/broadcast_add.py [--threads 1]

``relu(x + b)`` with ``x`` of ``(1, 64, 56, W)`` and a per-channel ``b`` of ``(1, 64, 1, 1)``
(a convolution's bias and activation, as a FlexPie tile of a 56-wide layer cut by columns sees
it), for widths that the vector lanes divide and widths they do not; the same ONNX file for
every engine, microseconds, the median of five timings. Results:
``benchmarks/results/broadcast_add.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import ort_seconds, tvm_seconds  # noqa: E402

WIDTHS = (7, 10, 11, 14, 20, 22, 28, 30, 56)


def bias_relu_onnx(width: int) -> onnx.ModelProto:
    """``relu(x + b)`` as an ONNX model."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, width])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 64, 1, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, width])
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "bias_relu", [x, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def main() -> None:
    from tvm_hetero.build.multi_device import BuildOptions
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "broadcast_add.json"))
    args = parser.parse_args()
    device = cpu_device(threads=args.threads)
    rows = []
    print(f"{'width':>5} {'rules us':>9} {'default us':>10} {'ORT us':>8} {'rules/ORT':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for width in WIDTHS:
            path = Path(tmp) / f"add{width}.onnx"
            onnx.save(bias_relu_onnx(width), path)
            model = load_model(path)
            inputs = model.random_inputs()
            row = {"width": width}
            outs = {}
            for mode in ("rules", "default"):
                seconds, outs[mode] = tvm_seconds(model, device, BuildOptions(mode), inputs)
                row[mode + "_us"] = seconds * 1e6
            seconds, ort_out = ort_seconds(path, inputs, args.threads)
            row["ort_us"] = seconds * 1e6
            assert np.allclose(outs["rules"][0], ort_out[0]), width
            rows.append(row)
            print(f"{width:>5} {row['rules_us']:>9.1f} {row['default_us']:>10.1f} "
                  f"{row['ort_us']:>8.1f} {row['rules_us'] / row['ort_us']:>8.2f}x")  # fmt: skip
    command = "benchmarks/cpu_kernels/broadcast_add.py " + " ".join(sys.argv[1:])
    Path(args.out).write_text(json.dumps({"command": command.strip(), "threads": args.threads,
                                          "target": device.target, "rows": rows}, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
