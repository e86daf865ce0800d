"""EOP's table on the GPU box, step 2 of 3: plan from the box's records, compile every plan.

Run here after the box timed EOP's exported workloads (``prepare.sh`` exported them,
``on_box.sh`` measured them): merges ``results.jsonl`` into the database, makes EOP's plan and
its baselines (CPU only, GPU only, Equal, Fixed) from the box's records and compiles each for
the box (``benchmarks/gpu/box.json``) into ``--to`` with its predicted time, for ``on_box.sh``
to time (step 3: ``eop_table.py`` sets predicted beside measured)::

    .venv/bin/python benchmarks/gpu/eop_plans.py lstm gru bert-small --batch 16 --to .gpu/b

``--zero-weights`` compiles the plans with zero weights (their outputs are then not checked):
BERT-small's 44-58 MB a plan pack into a few MB, so several travel in one call.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from tvm_hetero import api
from tvm_hetero.devices import ClusterSpec
from tvm_hetero.ir.workloads import zero_weights
from tvm_hetero.profiling.offline import OfflineRunner
from tvm_hetero.profiling.profiler import profiler_for
from tvm_hetero.runtime.measure import PROFILE_CONFIG
from tvm_hetero.strategies.eop import planner as eop
from tvm_hetero.zoo import load_zoo_model

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--cluster", type=Path, default=HERE / "box.json")
    parser.add_argument("--work", type=Path, default=Path(".gpu/a"), help="offline folders")
    parser.add_argument("--db", type=Path, default=Path(".gpu/profiles.jsonl"))
    parser.add_argument("--to", type=Path, default=Path(".gpu/b"))
    parser.add_argument(
        "--zero-weights",
        action="store_true",
        help="compile with the weights zero (timing only: a tar.xz of a few MB)",
    )
    parser.add_argument("--only", nargs="+", choices=eop.STRATEGIES, default=eop.STRATEGIES)
    args = parser.parse_args()
    cluster = ClusterSpec.load(args.cluster)
    devices = list(cluster.devices)
    args.to.mkdir(parents=True, exist_ok=True)
    predicted = {}
    for name in args.models:
        model = load_zoo_model(name, batch=args.batch)
        runner = OfflineRunner(args.work / f"eop_{name}", PROFILE_CONFIG)
        profiler = profiler_for(args.db, runner=runner)
        runner.merge_into(profiler.db)
        inputs = eop.measure_inputs(model, devices, profiler)
        if runner.entries:
            raise SystemExit(f"{name}: {len(runner.entries)} workloads not measured on the box")
        built = (
            dataclasses.replace(model, mod=zero_weights(model.mod)) if args.zero_weights else model
        )
        for strategy in args.only:
            plan = eop.plan(inputs, strategy)
            compiled = api.compile(built, api.in_plan_order(devices, plan), plan)
            path = compiled.save(args.to / f"{name}.{strategy}.tar")
            predicted[path.name] = {"model": name, "strategy": strategy,
                                    "predicted_ms": plan.predicted_s * 1e3,
                                    "home": plan.devices[0]}  # fmt: skip
            print(f"{path}: predicted {plan.predicted_s * 1e3:.3f} ms")
    (args.to / "predicted.json").write_text(json.dumps(predicted, indent=1))


if __name__ == "__main__":
    main()
