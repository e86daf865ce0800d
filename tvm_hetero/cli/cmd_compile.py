"""``tvm-hetero compile MODEL --device ... --output FILE``."""

from __future__ import annotations

import argparse
import time

from tvm_hetero import api
from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.cli.common import console, devices_from_args, model_from_args, parse_pairs, table
from tvm_hetero.plan.eop import SplitPlan


def placement_table(model, placement):
    """Rich table of a placement: ops, FLOPs share and copies per device."""
    rows = [
        [
            r["device"],
            r["ops"],
            r["flops"] / 1e9,
            100 * r["flops_share"],
            r["copies_in"],
            r["bytes_in"] / 2**20,
        ]
        for r in api.placement_summary(model, placement)
    ]
    return table("Placement", ["device", "ops", "GFLOPs", "FLOPs %", "copies in", "MiB in"], rows)


def schedule_table(choices) -> object:
    """Rich table: each kernel, its device kind and the schedule it got."""
    counts: dict[str, int] = {}
    for c in choices:
        counts[c.label] = counts.get(c.label, 0) + 1
    summary = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
    rows = [[c.kernel, c.target, c.label] for c in choices]
    return table(f"Kernel schedules ({summary})", ["kernel", "target", "schedule"], rows)


def run(args: argparse.Namespace) -> int:
    """Place, build, save; with --check also run and compare with one device."""
    model = model_from_args(args)
    devices = devices_from_args(args, ["cpu", "cpu:1"] if args.strategy == "eop" else ["cpu"])
    chosen = [flag for flag in ("plan", "place", "strategy") if getattr(args, flag)]
    if len(chosen) > 1:
        raise ValueError(f"compile: give one of --plan, --place, --strategy, not {chosen}")
    options = BuildOptions(args.cpu_schedule, args.tuning_db)
    if args.strategy == "eop":
        from tvm_hetero.cli import eop
        from tvm_hetero.strategies.eop import plan as plan_strategy

        placement = plan_strategy(eop.measure(args, model, devices), "eop", args.span)
    elif args.plan:
        from tvm_hetero.cli.eop import load_plan

        placement = load_plan(args.plan)
    else:
        placement = api.placement_from_rules(model, devices, parse_pairs(args.place, "--place"))
    if isinstance(placement, SplitPlan):
        from tvm_hetero.cli.eop import split_table

        devices = api.in_plan_order(devices, placement)
        console().print(split_table(placement))
    else:
        console().print(placement_table(model, placement))
    start = time.perf_counter()
    with console().status(f"compiling {model.name} for {', '.join(d.name for d in devices)}"):
        compiled = api.compile_model(model, devices, placement, options)
        path = compiled.save(args.output)
    console().print(f"compiled in {time.perf_counter() - start:.1f} s -> {path}")
    if args.explain:
        console().print(schedule_table(api.kernel_schedules(compiled, options)))
    if args.check:
        inputs = model.random_inputs()
        with console().status("checking against the single-device build"):
            err = api.max_abs_error(
                api.run_model(compiled, inputs), api.reference_outputs(model, inputs, devices[0])
            )
        console().print(f"max |multi-device - single-device| = {err:.3g}")
    return 0
