"""``tvm-hetero compile MODEL --device ... --output FILE``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

from tvm_hetero import api
from tvm_hetero.cli.cmd_plan import planned
from tvm_hetero.cli.common import (
    build_options,
    check_offline,
    console,
    devices_from_args,
    model_from_args,
    parse_pairs,
    table,
)
from tvm_hetero.plan.registry import load_plan
from tvm_hetero.strategies.base import placement_table
from tvm_hetero.strategies.registry import get_strategy, strategies


def describe(plan, model) -> object:
    """A table of ``plan``: as the strategy that makes plans of its kind shows one, else each
    device's operators (a placement by rules, or a plan kind no strategy claims)."""
    for strategy in strategies().values():
        if strategy.plan_kind == plan.to_dict()["kind"]:
            return strategy.describe(plan, model)
    return placement_table(model, plan)


def schedule_table(choices) -> object:
    """Rich table: each kernel, its device kind and the schedule it got."""
    counts: dict[str, int] = {}
    for c in choices:
        counts[c.label] = counts.get(c.label, 0) + 1
    summary = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
    rows = [[c.kernel, c.target, c.label] for c in choices]
    return table(f"Kernel schedules ({summary})", ["kernel", "target", "schedule"], rows)


def relative_argv(argv: list[str], folder: Path) -> list[str]:
    """``argv`` with every item that names an existing file or folder, or is absolute, made
    relative to ``folder`` (the ``.tar``'s): a ``.tar`` carries no absolute path, and
    ``run --replan`` compiles again from that folder."""
    out = []
    for item in argv:
        path = Path(item)
        named = path.exists() or path.is_absolute()
        out.append(os.path.relpath(path.resolve(), folder) if named else item)
    return out


def run(args: argparse.Namespace) -> int:
    """Place, build, save; with --check also run and compare with one device."""
    chosen = [flag for flag in ("plan", "place", "strategy") if getattr(args, flag)]
    if len(chosen) > 1:
        raise ValueError(f"compile: give one of --plan, --place, --strategy, not {chosen}")
    check_offline(args)
    strategy = get_strategy(args.strategy) if args.strategy else None
    model = model_from_args(args)
    plan = load_plan(args.plan, api.model_id(model)) if args.plan else None
    default = list(strategy.default_devices) if strategy else ["cpu"]
    devices = devices_from_args(args, list(plan.devices) if plan else default)
    options = build_options(args)
    compiled = None  # a strategy that compiled its plan while planning hands it over
    if strategy:  # what the strategy weighed, as plan --strategy shows it
        result = planned(args, strategy, model, devices)
        placement, compiled = result.plan, result.compiled
        shown = strategy.report(result, model, devices)
    else:
        placement = plan or api.placement_from_rules(
            model, devices, parse_pairs(args.place, "--place")
        )
        shown = [describe(placement, model)]
    for renderable in shown:
        console().print(renderable)
    devices = api.in_plan_order(devices, placement)
    start = time.perf_counter()
    if compiled is None:
        with console().status(f"compiling {model.name} for {', '.join(d.name for d in devices)}"):
            compiled = api.compile(model, devices, placement, options)
        how = f"compiled in {time.perf_counter() - start:.1f} s"
    else:
        how = "compiled while confirming"
    deployment = compiled.deployment
    console().print(
        f"{how} ({len(deployment.units)} units, "
        f"{len(deployment.copies)} copies between devices per run)"
    )
    if args.explain:
        console().print(schedule_table(api.kernel_schedules(compiled, options)))
    kept = args.keep_on_mismatch
    if args.check and not _matches(args, model, compiled, devices[0]) and not kept:
        console().print(f"[bold red]not written:[/] {args.output} (--keep-on-mismatch keeps it)")
        return 1
    recipe = {"argv": relative_argv(args.argv, Path(args.output).resolve().parent)}
    console().print(f"wrote {dataclasses.replace(deployment, recipe=recipe).save(args.output)}")
    return 0


def _matches(args: argparse.Namespace, model, compiled, home) -> bool:
    """Run once on random inputs and compare with the single-device build on ``home``:
    ``|got - ref| <= atol + rtol * |ref|`` everywhere."""
    import numpy as np

    inputs = model.random_inputs()
    with console().status("checking against the single-device build"):
        got, ref = api.run(compiled, inputs), api.reference_outputs(model, inputs, home)
    ok = all(
        np.allclose(g, r, rtol=args.rtol, atol=args.atol) for g, r in zip(got, ref, strict=True)
    )
    verdict = "[green]matches[/]" if ok else "[bold red]DIFFERS[/]"
    console().print(
        f"max |multi-device - single-device| = {api.max_abs_error(got, ref):.3g}: {verdict} "
        f"(rtol {args.rtol:g}, atol {args.atol:g})"
    )
    return ok
