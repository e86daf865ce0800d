"""FlexPie's plans priced by the estimators before and after traces were added, in one run.

    sudo .venv/bin/python benchmarks/flexpie/retraced.py ring4-1000 resnet18 mobilenet
        --added benchmarks/results/flexpie_traces_intel.jsonl [--rounds 5] [--runs 5]
        [--target host] [--out benchmarks/results/flexpie_retraced.jsonl]

Brings the case's cluster up (as ``latency.py``), fits the estimators on ``latency.py``'s
shipped traces less ``--added`` (before) and on all of them (now), plans each model with each
(FlexPie's plan as the DP chose it, not confirmed), builds both plans and times them in the
same interleaved rounds (``latency_in_rounds``), ONNX Runtime on one device of the cluster
(``ort.py``'s twin, one thread, held to ``--quota``) in every round. Appends a row per model:
each plan's schemes, price and median time. A plan that is the same both ways is built and
timed once.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import ort
from latency import (
    CASES,
    MODELS,
    SHIPPED_TRACES,
    TARGETS,
    _effect,
    built_once,
    case_cluster,
    fit_estimators,
    latency_in_rounds,
    median_of,
)
from stamp import stamp

from tvm_hetero import api
from tvm_hetero.frontends import load_model
from tvm_hetero.strategies.flexpie import planner as strategy

WAYS = ("before", "now")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case", choices=list(CASES))
    parser.add_argument("models", nargs="+", choices=list(MODELS))
    parser.add_argument("--added", nargs="+", required=True, choices=SHIPPED_TRACES,
                        help="shipped trace files the 'before' estimators leave out")  # fmt: skip
    parser.add_argument("--quota", type=float, default=0.45)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--target", choices=TARGETS, default="host")
    parser.add_argument("--db", default="benchmarks/results/flexpie_profiles.jsonl")
    parser.add_argument("--builds", default="build/flexpie-latency")
    parser.add_argument("--out", default="benchmarks/results/flexpie_retraced.jsonl")
    args = parser.parse_args()
    said = stamp()  # before this process is pinned to the home device's core
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        traces = {"before": [t for t in SHIPPED_TRACES if t not in args.added],
                  "now": SHIPPED_TRACES}  # fmt: skip
        estimators = {}
        for way, files in traces.items():
            fit_estimators(files, folder / way)
            estimators[way] = strategy.Estimators.load(folder / way)
        with case_cluster(args.case, args.quota, folder, args.target) as (cluster, devices):
            for name in args.models:
                row = measure(name, args, folder, cluster, devices, estimators)
                with open(args.out, "a") as out:
                    out.write(json.dumps({**row, **said}) + "\n")


def measure(name: str, args, folder: Path, cluster, devices: list, estimators: dict) -> dict:
    """One model planned both ways, both plans timed in the same rounds: its results row."""
    model = load_model(MODELS[name][0], **MODELS[name][1])
    plans, priced, built = {}, {}, {}
    for way in WAYS:
        result = strategy.plan_with_estimators(model, devices, cluster, estimators[way], args.db)
        plans[way], priced[way] = result.plan, result.partition.predicted_s
        if _effect(result.plan) not in built:
            used = api.in_plan_order(devices, result.plan)
            built[_effect(result.plan)] = built_once(model, name, used, result.plan, args.builds)
    twin = ort.export(name, folder)
    peers = {"onnxruntime": lambda runs: [t / 1e3 for t in ort.held_run(twin, args.quota, runs)]}
    timed = latency_in_rounds(built, model.random_inputs(), args.rounds, args.runs, peers)
    row = {"what": "FlexPie's plan by the estimators before and after traces were added",
           "case": args.case, "model": name, "added": args.added, "rounds": args.rounds,
           "runs": args.runs, "target": args.target,
           "ort_one_device_ms": round(median_of(timed["onnxruntime"]) * 1e3, 2)}  # fmt: skip
    for way in WAYS:
        ms = median_of(timed[_effect(plans[way])]) * 1e3
        row[way] = {"schemes": list(plans[way].schemes), "priced_ms": round(priced[way] * 1e3, 2),
                    "median_ms": round(ms, 2)}  # fmt: skip
        print(f"  {name} {way:>6}: priced {priced[way] * 1e3:6.1f} ms, ran {ms:6.1f} ms "
              f"({ms / (priced[way] * 1e3):.2f}x), {' '.join(plans[way].schemes)}", flush=True)  # fmt: skip
    print(f"  {name} ONNX Runtime on one device: {row['ort_one_device_ms']:.1f} ms", flush=True)
    return row


if __name__ == "__main__":
    main()
