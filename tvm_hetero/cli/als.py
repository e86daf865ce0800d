"""Lee et al. from the command line: ``plan --strategy als`` and ``compile --strategy als``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tvm_hetero.api import model_id
from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.cli.common import console, table
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.als import priority_assignment, priority_orders, total_time
from tvm_hetero.plan.placement import Placement
from tvm_hetero.plan.profiling_paths import profiling_runs
from tvm_hetero.plan.registry import save_plan
from tvm_hetero.strategies.als import (
    PIM_OPS,
    confirm_by_measurement,
    dcg_of,
    measure_costs,
    plan_als,
)


def make_plan(args: argparse.Namespace, model, devices) -> Placement:
    """The fewest profiling runs, executed; the optimal assignment, guarded and confirmed."""
    return _plan(args, model, devices)[0]


def _plan(args: argparse.Namespace, model, devices):
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
    return plan, dcg, costs


def run_plan(args: argparse.Namespace, model, devices) -> int:
    """``tvm-hetero plan MODEL --strategy als``: plan, compare with baselines, write, plot."""
    plan, dcg, costs = _plan(args, model, devices)
    names = [d.name for d in devices]
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
        save_plan(plan, model_id(model), args.output)
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
