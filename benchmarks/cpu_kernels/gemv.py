"""Batch-1 dense layers against the time to stream their weights (issue 14: "within 2x of the
time to stream the weights from memory").

    .venv/bin/python benchmarks/cpu_kernels/gemv.py [--threads 2]

``relu(x @ W.T + b)`` with ``x`` of ``(1, K)``, as ``nn.Linear`` exports it (ONNX ``Gemm``,
``transB=1``, weights as initializers), for the widths of the corpus' MLP towers, BERT's and
GPT-2's layers and an LSTM's gates; the same ONNX file for tvm-hetero's rules, TVM's default
loops and ONNX Runtime, microseconds, the median of timed runs. The bound is the weights' bytes
over the machine's bandwidth, measured here: numpy reading a 256 MiB array (over the last-level
cache), the best of five. Weights up to a few MiB stay in the cache between runs, so a kernel can
beat the bound. Results: ``benchmarks/results/gemv.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import ort_seconds, tvm_seconds  # noqa: E402

SHAPES = ((512, 1024), (1024, 1024), (768, 3072), (3072, 768), (1024, 4096), (256, 1024), (64, 256))
"""``(K, N)``: input and output features."""


def linear_relu_onnx(k: int, n: int) -> onnx.ModelProto:
    """``relu(Gemm(x, W, b, transB=1))`` with seeded ``W`` of ``(N, K)`` and ``b`` of ``(N,)``."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((n, k)) / k**0.5).astype("float32"), "W")
    bias = numpy_helper.from_array(rng.standard_normal(n).astype("float32"), "b")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["g"], transB=1),
             helper.make_node("Relu", ["g"], ["y"])]  # fmt: skip
    graph = helper.make_graph(nodes, "linear_relu", [x], [y], [weight, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def stream_bandwidth() -> float:
    """Bytes per second numpy reads from memory (a 256 MiB array, the best of five sums)."""
    array = np.ones(64 << 20, dtype=np.float32)
    array.sum()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        array.sum()
        best = min(best, time.perf_counter() - start)
    return array.nbytes / best


def main() -> None:
    from tvm_hetero.build.multi_device import BuildOptions
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "gemv.json"))
    args = parser.parse_args()
    device = cpu_device(threads=args.threads)
    bandwidth = stream_bandwidth()
    print(f"memory bandwidth {bandwidth / 1e9:.1f} GB/s (numpy, 256 MiB)")
    print(f"{'K x N':>11} {'MiB':>5} {'bound':>6} {'rules':>7} {'default':>8} {'ORT':>6} "
          f"{'rules/bound':>11} {'rules/ORT':>9}")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, n in SHAPES:
            path = Path(tmp) / f"linear{k}x{n}.onnx"
            onnx.save(linear_relu_onnx(k, n), path)
            model = load_model(path)
            inputs = model.random_inputs()
            row = {"k": k, "n": n, "bound_us": 4 * k * n / bandwidth * 1e6}
            outs = {}
            for mode in ("rules", "default"):
                seconds, outs[mode] = tvm_seconds(model, device, BuildOptions(mode), inputs)
                row[mode + "_us"] = seconds * 1e6
            seconds, ort_out = ort_seconds(path, inputs, args.threads, repeat=200)
            row["ort_us"] = seconds * 1e6
            np.testing.assert_allclose(outs["rules"][0], ort_out[0], rtol=1e-4, atol=1e-4)
            rows.append(row)
            print(f"{f'{k}x{n}':>11} {4 * k * n / 2**20:>5.1f} {row['bound_us']:>6.0f} "
                  f"{row['rules_us']:>7.0f} {row['default_us']:>8.0f} {row['ort_us']:>6.0f} "
                  f"{row['rules_us'] / row['bound_us']:>10.2f}x "
                  f"{row['rules_us'] / row['ort_us']:>8.2f}x")  # fmt: skip
    command = "benchmarks/cpu_kernels/gemv.py " + " ".join(sys.argv[1:])
    Path(args.out).write_text(json.dumps(
        {"command": command.strip(), "threads": args.threads, "target": device.target,
         "bandwidth_gb_s": bandwidth / 1e9, "rows": rows}, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
