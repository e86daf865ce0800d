"""Profiling benchmarks (issue 3).

    .venv/bin/python benchmarks/profiling.py

1. Profile every distinct operator of BERT-base (batch 1, sequence 128) on this CPU; report the
   time it takes, then a second run served from the database (target: >= 20x faster).
2. Repeatability: profile the distinct operators three times into fresh databases; the spread
   (max - min) / median of the three medians, for operators over 1 ms (target: < 5 %).
3. Per-operator times of one instrumented whole-model run of the small BERT on two vdevices against
   its end-to-end time (target: sum within 15 %).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from tvm_hetero import api
from tvm_hetero.build.multi_device import BuildOptions, build
from tvm_hetero.build.vdevices import runtime_devices
from tvm_hetero.devices import cpu_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.model_run import per_op_times
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.runtime.vm import make_vm, run
from tvm_hetero.zoo import load_zoo_model

CONFIG = MeasureConfig(repeat=10, min_repeat_ms=50)


def main() -> None:
    console = Console(width=150)
    device = cpu_device()
    rows = []
    bert = load_zoo_model("bert-base")
    n_ops = OpGraph.from_module(bert.mod).graph.number_of_nodes()
    with tempfile.TemporaryDirectory() as tmp:
        db_path = Path(tmp) / "bert.jsonl"
        start = time.perf_counter()
        first = Profiler(ProfileDB(db_path), config=CONFIG)
        records = first.profile_ops(bert.mod, device)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        second = Profiler(ProfileDB(db_path), config=CONFIG)
        second.profile_ops(bert.mod, device)
        warm = time.perf_counter() - start
        rows.append(["profile every operator of bert-base (seq 128)",
                     f"{n_ops} ops, {first.misses} distinct measured", f"{cold:.1f} s", "-"])  # fmt: skip
        rows.append(["second run, from the database", f"{second.hits} hits, {second.misses} measured",
                     f"{warm:.2f} s ({cold / warm:.0f}x faster)", ">= 20x"])  # fmt: skip

        medians: dict[str, list[float]] = {}
        distinct = {r.workload_key: node for node, r in records.items()}
        for i in range(3):
            p = Profiler(ProfileDB(Path(tmp) / f"rep{i}.jsonl"), config=CONFIG)
            for key, node in distinct.items():
                medians.setdefault(key, []).append(p.profile_op(bert.mod, node, device).median_s)
        spreads = [
            (max(m) - min(m)) / np.median(m) for m in medians.values() if np.median(m) > 1e-3
        ]
        rows.append(["repeatability, operators over 1 ms", f"{len(spreads)} operators",
                     f"spread of 3 medians: max {100 * max(spreads):.1f} %, median {100 * np.median(spreads):.1f} %",
                     "< 5 %"])  # fmt: skip

    small = load_zoo_model("bert-small")
    devices = [cpu_device(0), cpu_device(1)]
    placement = api.placement_from_rules(small, devices, {"matmul": "cpu:1"})
    placed = api.place(small, devices, placement)
    args = api.ordered_args(small.inputs, small.random_inputs())
    times = per_op_times(placed, args, runs=3)
    vdevices = list(placed.global_infos["vdevice"])
    devs = runtime_devices(vdevices)
    vm = make_vm(build(placed, BuildOptions(fuse=False)), devs)  # the same build, not instrumented
    walls = []
    for _ in range(6):
        start = time.perf_counter()
        run(vm, args, devs[0])
        walls.append(time.perf_counter() - start)
    e2e = float(np.median(walls[1:]))
    rows.append(["per-operator times of one run, bert-small on cpu + cpu:1",
                 f"{len(times.node_seconds)} kernels and copies",
                 f"sum {times.total_s * 1e3:.1f} ms vs end to end {e2e * 1e3:.1f} ms ({100 * (times.total_s / e2e - 1):+.1f} %)",
                 "within 15 %"])  # fmt: skip

    table = Table(
        title=f"Profiling benchmarks on {device.target['mcpu']}, {device.threads} threads, CPU rules"
    )
    for col in ("what", "size", "measured", "target"):
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    console.print(table)


if __name__ == "__main__":
    main()
