"""``tvm-hetero plan MODEL --strategy S --device ...``: measure, plan, compare with baselines."""

from __future__ import annotations

import argparse

from tvm_hetero import api
from tvm_hetero.cli.common import (
    BarProgress,
    check_offline,
    console,
    devices_from_args,
    model_from_args,
    progress_bar,
    settings_from_args,
    write_plan,
)
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.strategies.registry import get_strategy


def planned(args: argparse.Namespace, strategy, model, devices) -> api.PlanResult:
    """``strategy``'s plan of ``model`` on ``devices`` with the command's flags, a progress bar
    while it works and the strategy's lines printed as it says them."""
    settings = settings_from_args(args, strategy)
    with progress_bar() as bar:
        return api.plan_result(model, devices, strategy.name, BarProgress(bar), **settings)


def run(args: argparse.Namespace) -> int:
    """Plan with the chosen strategy; print its report, write the plan and its chart."""
    strategy = get_strategy(args.strategy)
    check_offline(args)
    model = model_from_args(args)
    devices = devices_from_args(args, list(strategy.default_devices))
    cluster = getattr(args, "cluster", None)
    why = strategy.applicable(model, devices, ClusterSpec.load(cluster) if cluster else None)
    if why is not None:  # planned anyway, as asked; optimize would leave it out
        console().print(f"[yellow]note:[/] {strategy.name} does not apply here ({why})")
    result = planned(args, strategy, model, devices)
    for shown in strategy.report(result, model, devices):
        console().print(shown)
    stream = strategy.objective == "throughput"
    write_plan(args, result.plan, model, "; run it with tvm-hetero run FILE --microbatches 8"
               if stream else "")  # fmt: skip
    if args.plot:
        path = strategy.plot(result, model, devices, args.plot)
        console().print(f"wrote {path}" if path else f"{strategy.name} draws no chart")
    return 0
