"""``tvm-hetero plan MODEL --strategy S --device ...``: measure, plan, compare with baselines."""

from __future__ import annotations

import argparse

from tvm_hetero.cli.common import check_offline, devices_from_args, model_from_args
from tvm_hetero.strategies.registry import get_strategy


def run(args: argparse.Namespace) -> int:
    """Plan with the chosen strategy (its module prints, plots and writes the plan)."""
    strategy = get_strategy(args.strategy)
    check_offline(args)
    model = model_from_args(args)
    devices = devices_from_args(args, list(strategy.default_devices))
    return int(strategy.module().run_plan(args, model, devices))
