"""EdgePipe from the command line: ``plan --strategy edgepipe`` and ``compile --strategy
edgepipe`` (``--cluster FILE`` gives the devices, their memories and the links)."""

from __future__ import annotations

import argparse
import math

import numpy as np

from tvm_hetero.cli.common import (
    build_options,
    console,
    progress_bar,
    progress_of,
    table,
    write_plan,
)
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.plan.pipeline_plan import PipelinePlan
from tvm_hetero.strategies import edgepipe as strategy


def make_plan(args: argparse.Namespace, model, devices) -> PipelinePlan:
    """Layers, their measured costs per kind of device, the cluster's links, the DP."""
    return _plan(args, model, devices).plan


def _plan(args: argparse.Namespace, model, devices) -> strategy.EdgePipeResult:
    cluster = ClusterSpec.load(args.cluster) if args.cluster else None
    options = build_options(args)
    with progress_bar() as bar:
        result = strategy.plan_with_measurements(
            model, devices, cluster, args.db, options,
            progress_of(bar, "layers compiled and timed"),
        )  # fmt: skip
    plan = result.plan
    console().print(
        f"EdgePipe: {len(plan.stages)} stage(s) on {', '.join(plan.devices)} of "
        f"{len(devices)} device(s); predicted period {_ms(plan.period_s)} ms "
        f"({len(result.layers)} layers, searched in {result.search_s * 1e3:.1f} ms)"
    )
    return result


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.3f}"


def stage_table(result: strategy.EdgePipeResult):
    """Rich table: each stage's device, layers, predicted compute, send and memory."""
    plan, problem = result.plan, result.problem
    rows = []
    for k, device in enumerate(plan.devices):
        first, last = plan.layers[k]
        cap = problem.memory[problem.names.index(device)]
        rows.append([
            k, device, f"{first}-{last}", len(plan.stages[k]), plan.compute_s[k] * 1e3,
            plan.send_s[k] * 1e3, plan.memory_bytes[k] / 2**20,
            "-" if cap is None else round(cap / 2**20, 1),
        ])  # fmt: skip
    cols = ["stage", "device", "layers", "ops", "compute ms", "send ms", "MiB", "cap MiB"]
    return table(f"{plan.strategy}: {len(plan.stages)} stages", cols, rows)


def baseline_table(result: strategy.EdgePipeResult):
    """Rich table: EdgePipe against GPipe and PipeDream over random device orders, and each
    device alone (predicted periods; OOM where a stage does not fit)."""
    best = result.partition.period_s
    rows = [["edgepipe", _ms(best), "-", "-", len(result.partition.stages), 0, "1.00"]]
    for name, parts in result.baselines.items():
        periods = np.array([p.period_s for p in parts])
        ok = periods[np.isfinite(periods)]
        rows.append([
            f"{name} x{len(parts)}",
            _ms(float(ok.mean())) if ok.size else "OOM",
            _ms(float(ok.min())) if ok.size else "-", _ms(float(ok.max())) if ok.size else "-",
            len(parts[0].stages), int((~np.isfinite(periods)).sum()),
            f"{ok.mean() / best:.2f}" if ok.size else "-",
        ])  # fmt: skip
    problem = result.problem
    for d, name in enumerate(problem.names):
        alone = strategy.edgepipe.evaluate(problem, [(0, problem.n_layers - 1, d)])
        ok = alone.feasible
        rows.append([
            f"{name} alone", _ms(alone.period_s) if ok else "OOM", "-", "-", 1, int(not ok),
            f"{alone.period_s / best:.2f}" if ok else "-",
        ])  # fmt: skip
    cols = ["partition", "period ms", "min", "max", "stages", "OOM", "x edgepipe"]
    return table("Predicted periods (mean over device orders)", cols, rows)


def run_plan(args: argparse.Namespace, model, devices) -> int:
    """``tvm-hetero plan MODEL --strategy edgepipe``: plan, compare, write, draw."""
    result = _plan(args, model, devices)
    console().print(stage_table(result))
    console().print(baseline_table(result))
    write_plan(args, result.plan, model, "; run it with tvm-hetero run FILE --microbatches 8")
    if args.plot:
        from tvm_hetero.viz.pipeline_stages import plot_pipeline_stages

        title = f"{model.name}: EdgePipe on {len(devices)} devices"
        path = plot_pipeline_stages(result.plan, result.layers.labels, title, args.plot)
        console().print(f"wrote {path}")
    return 0
