"""Lee et al. from the command line: ``plan --strategy als`` and ``compile --strategy als``."""

from __future__ import annotations

import argparse
from pathlib import Path

from tvm_hetero.cli.common import (
    build_options,
    console,
    profiler_from_args,
    stop_if_exported,
    table,
    write_plan,
)
from tvm_hetero.plan.als import priority_assignment, priority_orders, total_time
from tvm_hetero.plan.placement import Placement
from tvm_hetero.strategies import als


def make_plan(args: argparse.Namespace, model, devices) -> Placement:
    """The fewest profiling runs, executed; the optimal assignment, guarded and confirmed."""
    return _plan(args, model, devices).plan


def _plan(args: argparse.Namespace, model, devices) -> als.AlsResult:
    profiler = profiler_from_args(args)
    offline = getattr(profiler.runner, "offline", False)
    if offline and args.confirm:
        console().print("--offline: the plan is not confirmed end to end (nothing runs here)")
    with console().status("executing the profiling runs"):
        result = als.plan_with_runs(
            model, devices, build_options(args), args.pim,
            args.exact, args.min_gain, args.confirm and not offline, profiler,
        )  # fmt: skip
    stop_if_exported(args, profiler)
    if result.confirm_s:
        s = result.confirm_s
        console().print(
            f"measured end to end: plan {s['plan'] * 1e3:.3f} ms, best baseline "
            f"{s['baseline'] * 1e3:.3f} ms -> kept {result.plan.strategy}"
        )
    console().print(
        f"{len(result.runs)} profiling runs measured {len(result.dcg.ops)} operators and "
        f"{len(result.dcg.da_edges())} DA edges; planning took {result.plan_s * 1e3:.1f} ms"
    )
    return result


def run_plan(args: argparse.Namespace, model, devices) -> int:
    """``tvm-hetero plan MODEL --strategy als``: plan, compare with baselines, write, plot."""
    result = _plan(args, model, devices)
    plan, dcg, costs = result.plan, result.dcg, result.costs
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
    write_plan(args, plan, model)
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
