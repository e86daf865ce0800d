"""Tuned CPU kernels against numpy's BLAS on BERT-base's matmul shapes (issue 3).

    .venv/bin/python benchmarks/tuned_matmul.py [--trials 32] [--work-dir benchmarks/results/tuning]

For each distinct matmul of BERT-base (batch 1, sequence 128): the default TVM build, the build
with the MetaSchedule records of this run applied, and numpy (OpenBLAS) on the same shape and
thread count, each timed the same way. Target: tuned within 3x of BLAS. Prints the tuning time.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count()))  # before numpy loads BLAS, once

import numpy as np
from rich.console import Console
from rich.table import Table

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.build.tuning import tune
from tvm_hetero.devices import cpu_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.ir.workloads import input_infos, op_module, workload_key
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler, place_on
from tvm_hetero.runtime.measure import MeasureConfig, random_args
from tvm_hetero.zoo import load_zoo_model


def numpy_seconds(a: np.ndarray, b: np.ndarray, repeat: int = 20) -> float:
    np.matmul(a, b)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        np.matmul(a, b)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials", type=int, default=32, help="trials per matmul shape (0: measure only)"
    )
    parser.add_argument("--work-dir", default="benchmarks/results/tuning")
    args = parser.parse_args()
    console = Console(width=150)
    device = cpu_device()
    model = load_zoo_model("bert-base")
    graph = OpGraph.from_module(model.mod)
    shapes = {}
    for node in graph.nodes:
        if node.op == "relax.matmul":
            mod = op_module(model.mod, node.node_id)
            shapes.setdefault(workload_key(mod), (node, mod))
    db = ProfileDB(Path(args.work_dir) / "profiles.jsonl")
    config = MeasureConfig(repeat=10, min_repeat_ms=50)
    default = Profiler(db, config=config)
    rows = []
    for i, (node, mod) in enumerate(shapes.values(), 1):
        label = " x ".join("x".join(map(str, t.shape)) for t in node.inputs)
        console.print(f"[{i}/{len(shapes)}] tuning matmul {label} ({args.trials} trials)")
        start = time.perf_counter()
        trials = (
            tune(place_on(mod, [device]), args.work_dir, args.trials).trials if args.trials else 0
        )
        tune_s = time.perf_counter() - start
        tuned = Profiler(db, config=config, options=BuildOptions("metaschedule", args.work_dir))
        t_default = default.measure(mod, device, *_op(node)).median_s
        t_tuned = tuned.measure(mod, device, *_op(node)).median_s
        a, b = random_args(input_infos(mod))
        t_blas = numpy_seconds(a, b)
        rows.append(
            [
                label,
                t_default * 1e3,
                t_tuned * 1e3,
                t_blas * 1e3,
                t_tuned / t_blas,
                trials,
                tune_s,
            ]
        )
    table = Table(
        title=f"BERT-base matmuls on {device.target['mcpu']}, {device.threads} threads (ms)"
    )
    for col in ("shape", "default", "tuned", "numpy BLAS", "tuned / BLAS", "trials", "tuning s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r[0], *(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r[1:]))
    console.print(table)


def _op(node):
    from tvm_hetero.records import RecordKind

    return RecordKind.OP, {"op": node.op, "inputs": [list(t.shape) for t in node.inputs]}


if __name__ == "__main__":
    main()
