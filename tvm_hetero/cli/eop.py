"""EOP from the command line: ``plan --strategy eop`` and ``compile --strategy eop``."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from tvm_hetero.cli.common import (
    console,
    profiler_from_args,
    progress_bar,
    stop_if_exported,
    table,
    write_plan,
)
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.plan.eop import SplitPlan
from tvm_hetero.strategies import eop


def make_plan(args: argparse.Namespace, model: Model, devices: list[DeviceSpec]) -> SplitPlan:
    """Measure and make EOP's plan (``compile --strategy eop``)."""
    return eop.plan(measure(args, model, devices), "eop", args.span)


def measure(args: argparse.Namespace, model: Model, devices: list[DeviceSpec]) -> eop.EopInputs:
    """Profile what EOP needs (records are reused from ``--db``), with a progress bar. With
    ``--offline`` and no results yet, every cuttable operator is swept (the key operators are
    chosen from times the box has not taken) and the workloads exported instead."""
    profiler = profiler_from_args(args)
    exporting = getattr(profiler.runner, "offline", False) and not profiler.runner.measured
    key_share = 1.0 if exporting else args.key_share
    with progress_bar() as bar:
        task = bar.add_task("sweeping key operators", total=None)

        def progress(node: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=f"sweeping {node}")

        inputs = eop.measure_inputs(model, devices, profiler, key_share, args.samples, progress)
    stop_if_exported(args, profiler)
    console().print(
        f"{len(inputs.keys)} key operators; {profiler.misses} workloads measured, "
        f"{profiler.hits} from {profiler.db.path}"
    )
    return inputs


def plans(inputs: eop.EopInputs, span: float) -> dict[str, SplitPlan]:
    """EOP and every baseline, and the planner's own time in the EOP plan's notes."""
    out = {}
    for strategy in eop.STRATEGIES:
        start = time.perf_counter()
        out[strategy] = eop.plan(inputs, strategy, span)
        if strategy == "eop":
            seconds = time.perf_counter() - start
            out[strategy] = dataclasses.replace(out[strategy], notes={"plan_s": seconds})
    return out


def split_table(plan: SplitPlan) -> object:
    """The paper's Table 5: operator, dimension, (alpha, beta) and predicted times."""
    rows = [
        [s.node_id, s.op.removeprefix("relax."), s.dim, f"({s.ratios[0]:.2f}, {s.ratios[1]:.2f})",
         s.times_s[0] * 1e6, s.times_s[1] * 1e6, s.comm_s * 1e6, s.total_s * 1e6,
         "yes" if s.chained else ""]
        for s in plan.splits
    ]  # fmt: skip
    home, other = plan.devices[0], plan.devices[-1]
    cols = ["op id", "op", "dim", "(alpha, beta)", f"{home} us", f"{other} us", "copies us",
            "T us", "chained"]  # fmt: skip
    return table(f"{plan.strategy}: key operators ({home} | {other})", cols, rows)


def run_plan(args: argparse.Namespace, model: Model, devices: list[DeviceSpec]) -> int:
    """``tvm-hetero plan MODEL --strategy eop``: measure, plan, print, plot, write."""
    inputs = measure(args, model, devices)
    every = plans(inputs, args.span)
    best = every["eop"]
    console().print(split_table(best))
    rows = [[name, p.predicted_s * 1e3, ", ".join(p.devices)] for name, p in every.items()]
    console().print(
        table("Predicted AT(G, R), ms", ["strategy", "ms", "devices (home first)"], rows)
    )
    console().print(f"planning took {best.notes['plan_s'] * 1e3:.1f} ms")
    console().print(fits_table(inputs.fits))
    write_plan(args, best, model)
    if args.plot:
        from tvm_hetero.viz.splits import plot_split_plan

        console().print(f"wrote {plot_split_plan(best, model.name, Path(args.plot))}")
    return 0


def fits_table(fits: list[dict]) -> object:
    """One row per fitted workload (identical operators share one fit), with its held-out error."""
    groups: dict[tuple, list[dict]] = {}
    for f in fits:
        groups.setdefault((f["workload"], f["dim"], f["device"]), []).append(f)
    rows = [
        [g[0]["op"].removeprefix("relax."), g[0]["dim"], g[0]["device"], len(g), g[0]["kind"],
         100 * g[0]["error"]]
        for g in groups.values()
    ]  # fmt: skip
    errors = [r[-1] for r in rows]
    title = f"Fitted patterns (mean held-out error {sum(errors) / max(1, len(errors)):.1f} %)"
    return table(title, ["op", "dim", "device", "operators", "pattern", "error %"], rows)
