"""Where EdgePipe's pipeline loses rate on an emulated cluster: each stage priced, alone, piped.

    sudo .venv/bin/python benchmarks/edgepipe/timeline.py [--case homogeneous]
        [--target generic|host] [--microbatches 8] [--repeat 3]

Brings the case's cluster up (as ``throughput.py``, links as declared), plans the model with
EdgePipe (the profiles in ``--db``: a ``throughput.py`` run's are reused), builds its plan and
prints, for each stage's device: the stage's price (its layers' profiled seconds summed), the
stage's time on its device with one microbatch in the pipeline at a time (the others idle),
and its time and wait a microbatch with ``--microbatches`` in the pipeline (medians over
``--repeat`` batches, from the executor's timeline). The steady rate is bounded by the slowest
stage's time in the pipeline; a stage slower there than alone loses to the others' company, one
slower alone than priced to its price.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
from pathlib import Path

from throughput import CASES, TARGETS, spec_file, warmed  # puts benchmarks/ on the path

from tvm_hetero import api
from tvm_hetero.devices import ClusterSpec
from tvm_hetero.emulation import control
from tvm_hetero.emulation.layout import cluster_tag, plan_layout
from tvm_hetero.frontends import load_model
from tvm_hetero.runtime.stats import pipeline_stats
from tvm_hetero.strategies.edgepipe import planner as strategy


def stage_times(ex, batches: list, together: bool) -> dict[str, list[tuple[float, float]]]:
    """Each worker's (busy, waited) seconds a microbatch: ``batches`` run as one pipelined
    batch when ``together``, else one microbatch a run."""
    got = collections.defaultdict(list)
    for group in [batches] if together else [[b] for b in batches]:
        ex.run_many(group)
        for e in ex.timeline.events:
            got[e.worker].append((e.busy_s, e.waited_s))
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="homogeneous", choices=list(CASES))
    parser.add_argument("--target", choices=TARGETS, default="host")
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db", default="benchmarks/results/edgepipe_profiles.jsonl")
    args = parser.parse_args()
    why = control.missing_privilege()
    if why:
        sys.exit(f"timeline: {why}")
    folder = Path(tempfile.gettempdir()) / "tvm-hetero-edgepipe-bench"
    folder.mkdir(exist_ok=True)
    model = load_model("vit-base", hidden=384, heads=6, ffn=1536)
    path = spec_file(args.case, folder, args.target)
    spec, tag = ClusterSpec.load(path), cluster_tag(path)
    cluster = control.up(spec, plan_layout(spec, tag))
    try:
        devices = list(cluster.devices)
        result = strategy.plan_with_measurements(model, devices, cluster, db=args.db)
        plan, problem = result.plan, result.problem
        names = list(problem.names)
        deployment = api.compile(model, api.in_plan_order(devices, plan), plan).deployment
        feeds = [model.random_inputs(seed) for seed in range(args.microbatches)]
        alone, piped, rates = collections.defaultdict(list), collections.defaultdict(list), []
        with warmed(deployment, feeds) as (ex, batches):
            for _ in range(args.repeat):
                for worker, times in stage_times(ex, batches, together=False).items():
                    alone[worker] += times
                for worker, times in stage_times(ex, batches, together=True).items():
                    piped[worker] += times
                rates.append(1 / pipeline_stats(ex.timeline, ex.finished_s).steady_s)
        print(f"{args.case} ({args.target}): stages {plan.layers}, priced "
              f"{1 / result.partition.period_s:.2f} /s, ran {statistics.median(rates):.2f} /s "
              f"(steady, median of {args.repeat})")  # fmt: skip
        print(f"{'device':8} {'layers':>8} {'priced ms':>10} {'alone ms':>9} {'piped ms':>9} "
              f"{'waited ms':>10}")  # fmt: skip
        for (first, last), name in zip(plan.layers, plan.devices, strict=True):
            priced = sum(problem.layer_s[names.index(name)][first : last + 1])
            one = statistics.median(b for b, _ in alone[name])
            busy = statistics.median(b for b, _ in piped[name])
            waited = statistics.median(w for _, w in piped[name])
            print(f"{name:8} {f'{first}-{last}':>8} {priced * 1e3:10.1f} {one * 1e3:9.1f} "
                  f"{busy * 1e3:9.1f} {waited * 1e3:10.1f}")  # fmt: skip
    finally:
        control.down(tag)


if __name__ == "__main__":
    main()
