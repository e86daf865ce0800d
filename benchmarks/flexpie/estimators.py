"""FlexPie's estimators on held-out traces (goal: MAPE < 15 %), and the shipped estimators.

    .venv/bin/python benchmarks/flexpie/estimators.py [--traces FILE ...] [--again FILE] [--ship]

Trains the compute, sync and rearrange estimators on the traces ``latency.py --collect``
measured on the emulated clusters (a workload traced in several files is one workload with its
median time, as ``train`` has it), with 20 % of the workloads held out (``--splits`` random
splits: mean and spread of the held-out MAPE, and the median error), and the compute
estimator's held-out error per operator kind; with ``--again`` (the same workloads traced
another time), how well a label of the first ``--traces`` file repeats there: one
measurement's error as the other's prediction, a floor for any estimator trained on such
labels. ``--ship`` writes the estimators fitted on all traces to
``tvm_hetero/costmodel/models/flexpie/`` (the default of ``--strategy flexpie``).
Results: ``benchmarks/results/flexpie_estimators.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from latency import SHIPPED_TRACES, fitting_traces

from tvm_hetero.costmodel.estimators import FEATURES, OP_KINDS, distinct_workloads, train
from tvm_hetero.strategies.flexpie.planner import DEFAULT_MODELS
from tvm_hetero.strategies.flexpie.traces import read_traces

GROUPS = ("kind", "lanes")
"""Features whose values the held-out errors are also reported by."""


def held_out_errors(name, rows, seconds, splits):
    """Absolute percentage errors on the held-out fifth of ``splits`` random splits of the
    distinct workloads (each estimator fitted on the rest), and the errors by each value of
    :data:`GROUPS` (the compute estimator's operator kind; the devices' vector lanes: code
    built for generic x86-64 has 4, for the Zen 5 host's CPU 16, for the Zen 3 host's 8)."""
    rows, seconds = distinct_workloads(name, rows, seconds)
    columns = {g: FEATURES[name].index(g) for g in GROUPS if g in FEATURES[name]}
    errors, per_group = [], {g: {} for g in columns}
    for seed in range(splits):
        order = np.random.default_rng(seed).permutation(len(seconds))
        test, fit = order[: round(len(order) * 0.2)], order[round(len(order) * 0.2) :]
        est = train(name, rows[fit], seconds[fit], seed=seed)
        ape = np.abs(est.predict(rows[test]) - seconds[test]) / seconds[test]
        errors.append(ape)
        for i, e in zip(test, ape, strict=True):
            for group, column in columns.items():
                per_group[group].setdefault(int(rows[i, column]), []).append(e)
    return errors, per_group, len(seconds)


def repeat_errors(first: tuple, again: tuple) -> np.ndarray:
    """Absolute percentage errors of one measurement of a workload as the prediction of
    another (both directions, every workload in both trace sets once): how well a label
    repeats, which bounds how well an estimator trained on such labels can score."""

    def by_row(rows, seconds):
        out = {}
        for row, s in zip(rows, seconds, strict=True):
            out.setdefault(json.dumps(row, sort_keys=True), s)
        return out

    a, b = by_row(*first), by_row(*again)
    pairs = np.array([(a[k], b[k]) for k in a.keys() & b.keys()]).reshape(-1, 2)
    return np.concatenate([np.abs(pairs[:, 0] - pairs[:, 1]) / pairs[:, 1],
                           np.abs(pairs[:, 1] - pairs[:, 0]) / pairs[:, 0]])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", nargs="+", default=SHIPPED_TRACES)
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--ship", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/flexpie_estimators.json")
    parser.add_argument("--again", default="benchmarks/results/flexpie_traces_zen5_again.jsonl",
                        help="the same workloads traced another time: how labels repeat")  # fmt: skip
    args = parser.parse_args()
    found = fitting_traces(args.traces)
    again = read_traces(args.again) if Path(args.again).exists() else {}
    first = read_traces(args.traces[0]) if again else {}
    results = {}
    kinds = {v: k for k, v in OP_KINDS.items()}
    for name in FEATURES:
        rows, seconds = found[name]
        errors, per_group, workloads = held_out_errors(name, rows, seconds, args.splits)
        mapes = [float(np.mean(e)) for e in errors]
        results[name] = {"traces": len(seconds), "workloads": workloads,
                         "mape_mean": float(np.mean(mapes)), "mape_min": float(np.min(mapes)), "mape_max": float(np.max(mapes)),
                         "median_ape": float(np.median(np.concatenate(errors)))}  # fmt: skip
        print(f"{name:>9}: {len(seconds)} traces of {workloads} workloads, held-out MAPE "
              f"{np.mean(mapes):.1%} ({np.min(mapes):.1%}-{np.max(mapes):.1%}), median "
              f"{results[name]['median_ape']:.1%}")  # fmt: skip
        if name in again and name in first:
            repeat = repeat_errors(first[name], again[name])
            results[name]["repeat"] = {"workloads": len(repeat) // 2,
                                       "mape": float(np.mean(repeat)) if len(repeat) else None,
                                       "again": args.again}  # fmt: skip
            if len(repeat):
                print(f"  {name} traced again: {len(repeat) // 2} workloads, one measurement "
                      f"as the other's prediction: MAPE {np.mean(repeat):.1%}")  # fmt: skip
        for group, by_value in per_group.items():
            named = {
                kinds[v] if group == "kind" else f"{v} lanes": e
                for v, e in sorted(by_value.items())
            }
            results[f"{name}_per_{group}"] = {
                label: {"held_out": len(e), "mape": float(np.mean(e))} for label, e in named.items()
            }
            for label, r in results[f"{name}_per_{group}"].items():
                print(f"  {name}, {label}: {r['held_out']} held out, MAPE {r['mape']:.1%}")
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
