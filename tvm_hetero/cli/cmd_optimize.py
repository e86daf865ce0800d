"""``tvm-hetero optimize MODEL --device ... -o best.tar``: every strategy that applies and each
device alone, the promising ones timed end to end, the fastest written."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from tvm_hetero import api
from tvm_hetero.cli.cmd_compile import relative_argv
from tvm_hetero.cli.common import (
    BarProgress,
    console,
    devices_from_args,
    model_from_args,
    progress_bar,
    settings_from_args,
)


def default_devices() -> list[str]:
    """The devices of this machine worth spreading over: its CPU and its first GPU, or two
    halves of its cores when it has no GPU."""
    from tvm_hetero.devices import gpu_count
    from tvm_hetero.runtime.device import usable_cores

    if gpu_count():
        return ["cpu", "cuda:0"]
    cores = sorted(usable_cores())
    if len(cores) < 2:
        return ["cpu"]
    half = len(cores) // 2
    return [_core_set(cores[:half]), _core_set(cores[half:])]


def _core_set(cores: list[int]) -> str:
    return f"cpu@{cores[0]}" if len(cores) == 1 else f"cpu@{cores[0]}-{cores[-1]}"


def shown(model, devices, **given) -> api.OptimizeResult:
    """``api.optimize`` with a progress bar, then its candidates' table, why some were left out
    and the verdict, printed (what ``optimize`` and ``demo`` show)."""
    from tvm_hetero.optimize.report import candidates_table, left_out, took, verdict

    with progress_bar() as bar:
        result = api.optimize(model, devices, progress=BarProgress(bar), **given)
    out = console()
    out.print(candidates_table(result))
    out.print(_reasons_grid(left_out(result)))
    out.print(f"[bold]{verdict(result)}[/]")
    out.print(f"[dim]The search took {result.seconds:.0f} s{took(result)}.[/]")
    return result


def _reasons_grid(left: list[tuple[str, str]]):  # -> rich.table.Table
    """Why candidates were left out, a line each: the candidate's name, then its reason, which
    wraps under itself on a narrow terminal (it wrapped to the first column before)."""
    from rich.table import Table

    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for name, why in left:
        grid.add_row(f"  {name}:", why)
    return grid


def run(args: argparse.Namespace) -> int:
    """Search, print the candidates and the verdict, write the deployment, report and chart."""
    model = model_from_args(args)
    devices = devices_from_args(args, default_devices())
    onnx = args.model if str(args.model).endswith(".onnx") else None
    settings = settings_from_args(args)
    result = shown(
        model, devices, objective=args.objective, budget_s=args.budget * 60, onnx=onnx,
        top=args.top, runs=args.runs, **settings,
    )  # fmt: skip
    from tvm_hetero.optimize.report import markdown, plot

    out = console()
    deployment = result.compiled.deployment
    recipe = {"argv": relative_argv(args.argv, Path(args.output).resolve().parent)}
    out.print(f"wrote {dataclasses.replace(deployment, recipe=recipe).save(args.output)}")
    if args.report:
        path = Path(args.report)
        path.write_text(markdown(result, [d.name for d in devices]))
        out.print(f"wrote {path}")
    if args.plot:
        out.print(f"wrote {plot(result, args.plot)}")
    return 0
