"""DUET on this machine: two one-core CPU workers against the best single-device build and ONNX
Runtime (issue 16; paper Table II, Fig. 11-13).

    .venv/bin/pip install -e ".[bench]"      # ONNX Runtime and onnxscript, for the comparison
    .venv/bin/python benchmarks/duet/bench.py [--models wide-deep siamese-lstm mt-dnn]
        [--budget 8] [--schedulers] [--runs 200] [--out benchmarks/results/duet.json]

Per model (paper preset, batch 1): DUET planned on ``cpu@0`` + ``cpu@1`` (phases, compiler-aware
subgraph costs, correction by measured runs, fallback), then the kept plan and the single-device
builds timed on the concurrent runtime, ``--runs`` runs each (p50 / p99 / p99.9). The single
devices: ``cpu`` (one worker, both cores: the best single device here) and ``cpu@0`` (one core).
ONNX Runtime runs a torch twin of the model (same architecture and shapes, its own random
weights: ``benchmarks/torch_twins.py``) with 2 threads, sequential (intra-op 2) and ``ORT_PARALLEL``
(inter-op 2, intra-op 1). ``--schedulers`` adds the paper's Fig. 13: Random, Round-robin,
Random + Correction, Greedy + Correction and Ideal (enumerated with the cost model), measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from tvm_hetero import api
from tvm_hetero.devices import resolve_device
from tvm_hetero.plan import duet
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.strategies.duet import planner as strategy
from tvm_hetero.zoo import load_zoo_model

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from stamp import stamp  # noqa: E402


def latency(compiled, inputs, runs: int) -> dict:
    """p50 / p99 / p99.9 in ms over ``runs`` runs on the concurrent runtime."""
    with Executor(compiled.deployment) as ex:
        stats = ex.time(api.ordered_args(compiled.model.inputs, inputs), repeat=runs, warmup=5)
    return {"p50": stats.median_ms, "p99": stats.p99_ms, "p99.9": stats.p999_ms}


def ort_latency(name: str, runs: int, work: Path, settings: dict) -> dict:
    """ONNX Runtime on the torch twin, 2 threads, sequential and parallel, p50 ms."""
    try:
        from ort_timing import cpu_session, run_ms
        from torch_twins import onnx_twin
    except ImportError as err:
        return {"error": str(err)}
    path, feeds = onnx_twin(name, work, **settings)
    out = {}
    for mode, inter, intra in (("sequential", 1, 2), ("parallel", 2, 1)):
        sess = cpu_session(path, intra, inter, parallel=mode == "parallel")
        samples = run_ms(sess, feeds, runs, warmup=5)
        out[mode] = float(np.median(samples))
    return out


def schedulers(model, workers, result, budget: int, db: Path) -> dict:
    """Fig. 13: each scheduler's placement measured end to end (same timer and records as the
    correction)."""
    costs, dg = result.costs, result.graph
    timer = strategy.EndToEnd(model, workers, dg, strategy.profiler_for(db))
    rnd = duet.random_assignment(costs, seed=0)
    plans = {
        "random": rnd,
        "round-robin": duet.round_robin(costs),
        "random + correction": duet.correct(costs, rnd, timer, budget).assignment,
        "greedy + correction": duet.correct(costs, duet.greedy(costs), timer, budget).assignment,
    }
    if costs.n_devices**costs.n_subgraphs <= 1 << 16:
        plans["ideal (cost model)"] = duet.ideal(costs)
    return {
        k: {"assignment": list(a), "predicted_ms": duet.predicted_s(costs, a) * 1e3,
            "measured_ms": timer(a) * 1e3}
        for k, a in plans.items()
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["wide-deep", "siamese-lstm", "mt-dnn"])
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--schedulers", action="store_true")
    parser.add_argument(
        "--set", action="append", default=[], metavar="MODEL:KEY=VALUE",
        help="change a zoo setting of one model (the ONNX Runtime twin follows), e.g. mt-dnn:seq_len=8",
    )  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/duet.json")
    args = parser.parse_args()
    console = Console(width=120)
    workers = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    both, one = resolve_device("cpu"), workers[0]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        settings: dict[str, dict] = {}
        for item in args.set:
            target, _, pair = item.partition(":")
            key, _, value = pair.partition("=")
            settings.setdefault(target, {})[key] = int(value)
        for name in args.models:
            model = load_zoo_model(name, **settings.get(name, {}))
            inputs = model.random_inputs()
            start = time.perf_counter()
            result = strategy.plan_with_measurements(
                model, workers, work / "profiles.jsonl", budget=args.budget
            )  # fmt: skip
            plan_s = time.perf_counter() - start
            kept = api.compile(model, api.in_plan_order(workers, result.plan), result.plan)
            row = {
                "plan": result.plan.to_dict(),
                "plan_seconds": plan_s,
                "subgraphs": [
                    {
                        "ops": len(s),
                        "ms": [t * 1e3 for t in result.costs.seconds[k]],
                        "phase": result.graph.phase[k],
                    }
                    for k, s in enumerate(result.graph.subgraphs)
                ],
                "trials": [[list(a), s * 1e3] for a, s in result.correction.trials],
                "singles_ms": {k: v * 1e3 for k, v in result.singles.items()},
                "duet": latency(kept, inputs, args.runs),
                "cpu": latency(api.compile(model, [both]), inputs, args.runs),
                "cpu@0": latency(api.compile(model, [one]), inputs, args.runs),
                "settings": settings.get(name, {}),
                "onnxruntime": ort_latency(name, args.runs, work, settings.get(name, {})),
            }
            ref = api.run(api.compile(model, [both]), inputs)
            row["max_error"] = api.max_abs_error(api.run(kept, inputs), ref)
            if args.schedulers:
                row["schedulers"] = schedulers(
                    model, workers, result, args.budget, work / "profiles.jsonl"
                )
            rows[name] = row
            console.print(f"{name}: {result.plan.strategy} on {result.plan.devices}, "
                          f"planned in {plan_s:.0f} s")  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": stamp(), "models": rows}, indent=1))
    table = Table(title="DUET on cpu@0 + cpu@1 vs single devices and ONNX Runtime (ms, batch 1)")
    for col in ("model", "kept", "DUET p50", "p99", "p99.9", "cpu p50", "cpu@0 p50",
                "speedup vs cpu", "ORT seq", "ORT par"):  # fmt: skip
        table.add_column(col)
    for name, r in rows.items():
        ort = r["onnxruntime"]
        table.add_row(
            name, r["plan"]["strategy"], f"{r['duet']['p50']:.2f}", f"{r['duet']['p99']:.2f}",
            f"{r['duet']['p99.9']:.2f}", f"{r['cpu']['p50']:.2f}", f"{r['cpu@0']['p50']:.2f}",
            f"{r['cpu']['p50'] / r['duet']['p50']:.2f}x",
            f"{ort.get('sequential', float('nan')):.2f}", f"{ort.get('parallel', float('nan')):.2f}",
        )  # fmt: skip
    console.print(table)
    for name, r in rows.items():
        for k, v in r.get("schedulers", {}).items():
            console.print(f"{name} {k:>20}: predicted {v['predicted_ms']:.2f} ms, measured "
                          f"{v['measured_ms']:.2f} ms {v['assignment']}")  # fmt: skip
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
