"""``tvm-hetero plan MODEL --strategy als --device ...``: measure, plan, compare with baselines."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.cli.common import console, devices_from_args, model_from_args, table
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.als import priority_assignment, priority_orders, total_time
from tvm_hetero.plan.profiling_paths import profiling_runs
from tvm_hetero.strategies.als import (
    PIM_OPS,
    confirm_by_measurement,
    dcg_of,
    measure_costs,
    plan_als,
)


def run(args: argparse.Namespace) -> int:
    """Lee et al.: the fewest profiling runs, executed; then the optimal assignment."""
    model = model_from_args(args)
    devices = devices_from_args(args, ["cpu", "cpu:1"])
    if args.strategy == "eop":
        from tvm_hetero.cli import eop

        return eop.run_plan(args, model, devices)
    names = [d.name for d in devices]
    if args.pim is not None and args.pim not in names[1:]:
        raise ValueError(f"--pim {args.pim!r}: must be one of the non-home devices {names[1:]}")
    dcg = dcg_of(OpGraph.from_module(model.mod), names, {args.pim: PIM_OPS} if args.pim else None)
    runs = profiling_runs(dcg)
    options = BuildOptions(args.cpu_schedule, args.tuning_db)
    with console().status(f"executing {len(runs)} profiling runs"):
        costs = measure_costs(model, devices, dcg, runs, options)
    start = time.perf_counter()
    plan = plan_als(dcg, costs, exact=args.exact, min_gain=args.min_gain)
    plan_s = time.perf_counter() - start
    if args.confirm:
        with console().status("timing the plan and the best baseline end to end"):
            plan, seconds = confirm_by_measurement(model, devices, plan, dcg, costs, options)
        if seconds:
            console().print(
                f"measured end to end: plan {seconds['plan'] * 1e3:.3f} ms, best baseline "
                f"{seconds['baseline'] * 1e3:.3f} ms -> kept {plan.strategy}"
            )
    console().print(
        f"{len(runs)} profiling runs measured {len(dcg.ops)} operators and "
        f"{len(dcg.da_edges())} DA edges; planning took {plan_s * 1e3:.1f} ms"
    )
    rows = []
    for label, assignment in _baselines(dcg, names):
        rows.append([label, total_time(dcg, costs, assignment) * 1e3])
    rows.append([plan.strategy, plan.predicted_s * 1e3])
    best = plan.predicted_s * 1e3
    console().print(
        table("Predicted time (ms, one operator at a time)", ["assignment", "ms"], rows)
    )
    counts = [[n, sum(1 for o in dcg.ops if plan.device_of(o) == i)] for i, n in enumerate(names)]
    console().print(
        table(
            f"{plan.strategy}: operators per device ({best:.3f} ms)",
            ["device", "operators"],
            counts,
        )
    )
    if args.output:
        Path(args.output).write_text(plan.to_json())
        console().print(
            f"wrote {args.output} (deploy: tvm-hetero compile {args.model} --plan {args.output})"
        )
    if args.plot:
        from tvm_hetero.viz.timeline import plot_timeline

        assignment = {o: plan.device_of(o) for o in dcg.ops}
        title = f"{model.name}: {plan.strategy}"
        console().print(f"wrote {plot_timeline(dcg, costs, assignment, title, Path(args.plot))}")
    return 0


def _baselines(dcg, names):
    """Each device first, the rest in list order (ONNX-Runtime-style priorities)."""
    for order in priority_orders(len(names)):
        yield f"priority ({', '.join(names[j] for j in order)})", priority_assignment(dcg, order)
