"""ALS (the paper's DP, exact on chains) against the exact MILP optimum on every zoo model (issue 5).

    .venv/bin/python benchmarks/als/gap.py [--preset paper|tiny] [--models NAME ...]

Costs are measured for real (Algorithm 1's profiling runs on CPU_P + CPU_S, CPU rules), then both
planners run on the same DCG. Branches (residual connections, attention) are where the DP, which
charges every input's copy as if it came from the previous operator, can miss the optimum; the gap
is ``ALS total / MILP total - 1`` under the same cost model. Writes benchmarks/results/als_gap.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tvm_hetero.devices.discover import resolve_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.als import als_assignment, exact_assignment
from tvm_hetero.plan.profiling_paths import profiling_runs
from tvm_hetero.strategies.als.planner import dcg_of, measure_costs
from tvm_hetero.zoo import ZOO, load_zoo_model


def one(name: str, preset: str) -> dict:
    model = load_zoo_model(f"{name}:{preset}" if preset == "tiny" else name)
    devices = [resolve_device("cpu"), resolve_device("cpu-serial")]
    dcg = dcg_of(OpGraph.from_module(model.mod), [d.name for d in devices])
    costs = measure_costs(model, devices, dcg, profiling_runs(dcg))
    start = time.perf_counter()
    _, als_s = als_assignment(dcg, costs)
    als_time = time.perf_counter() - start
    start = time.perf_counter()
    _, milp_s = exact_assignment(dcg, costs)
    milp_time = time.perf_counter() - start
    return {
        "model": name, "preset": preset, **dcg.sizes(), "als_ms": als_s * 1e3,
        "milp_ms": milp_s * 1e3, "gap": als_s / milp_s - 1, "als_s": als_time,
        "milp_s": milp_time,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["paper", "tiny"], default="paper")
    parser.add_argument("--models", nargs="+", default=sorted(ZOO), choices=sorted(ZOO))
    parser.add_argument("--out", default="benchmarks/results/als_gap.json")
    args = parser.parse_args()
    rows = []
    for name in args.models:
        rows.append(one(name, args.preset))
        r = rows[-1]
        print(f"{name:>12}: {r['cg_nodes']:>5} ops  ALS {r['als_ms']:9.3f} ms  MILP "
              f"{r['milp_ms']:9.3f} ms  gap {100 * r['gap']:.3f} %  "
              f"(ALS {r['als_s']:.3f} s, MILP {r['milp_s']:.2f} s)", flush=True)  # fmt: skip
        meta = {"command": "python benchmarks/als/gap.py " + " ".join(sys.argv[1:])}
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
