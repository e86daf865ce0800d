"""FlexPie's estimators on held-out traces (goal: MAPE < 15 %), and the shipped estimators.

    .venv/bin/python benchmarks/flexpie/estimators.py [--traces benchmarks/results/flexpie_traces.jsonl]
        [--ship]

Trains the compute, sync and rearrange estimators on the traces ``latency.py --collect``
measured on the emulated clusters, with 20 % of them held out (five random splits: mean and
spread of the held-out MAPE), and the compute estimator's error per operator kind. ``--ship``
writes the estimators fitted on all traces to ``tvm_hetero/costmodel/models/flexpie/`` (the
default of ``--strategy flexpie``).
Results: ``benchmarks/results/flexpie_estimators.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from tvm_hetero.costmodel.estimators import FEATURES, OP_KINDS, train
from tvm_hetero.profiling.traces import read_traces
from tvm_hetero.strategies.flexpie import DEFAULT_MODELS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", default="benchmarks/results/flexpie_traces.jsonl")
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--ship", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/flexpie_estimators.json")
    args = parser.parse_args()
    found = read_traces(args.traces)
    results = {}
    for name in FEATURES:
        rows, seconds = found[name]
        mapes = [train(name, rows, seconds, seed=s).held_out_mape for s in range(args.splits)]
        results[name] = {"traces": len(seconds), "mape_mean": float(np.mean(mapes)),
                         "mape_min": float(np.min(mapes)), "mape_max": float(np.max(mapes))}  # fmt: skip
        print(f"{name:>9}: {len(seconds)} traces, held-out MAPE {np.mean(mapes):.1%} "
              f"({np.min(mapes):.1%}-{np.max(mapes):.1%})")  # fmt: skip
    rows, seconds = found["compute"]
    kinds = {v: k for k, v in OP_KINDS.items()}
    per_kind = {}
    for kind in sorted({int(r["kind"]) for r in rows}):
        idx = [i for i, r in enumerate(rows) if int(r["kind"]) == kind]
        if len(idx) >= 10:
            est = train("compute", [rows[i] for i in idx], [seconds[i] for i in idx])
            per_kind[kinds[kind]] = {"traces": len(idx), "mape": est.held_out_mape}
            print(f"  compute, {kinds[kind]} alone: {len(idx)} traces, {est.held_out_mape:.1%}")
    results["compute_per_kind"] = per_kind
    Path(args.out).write_text(json.dumps({"traces": args.traces, **results}, indent=1) + "\n")
    if args.ship:
        for name in FEATURES:
            rows, seconds = found[name]
            est = train(name, rows, seconds, notes={"traces": args.traces,
                                                    "cluster": "benchmarks/flexpie/latency.py"})  # fmt: skip
            print(f"shipped {est.save(DEFAULT_MODELS)}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
