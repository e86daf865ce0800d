"""EdgePipe planned and tabled: what ``plan --strategy edgepipe`` and ``optimize`` show."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.strategies.base import Candidate, PlanResult, Progress
from tvm_hetero.strategies.edgepipe import planner as strategy
from tvm_hetero.viz.tables import table


def plan_result(
    model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace, progress: Progress
) -> PlanResult:  # fmt: skip
    """Layers, their measured costs per kind of device, the cluster's links, the DP."""
    progress.step("layers compiled and timed", 0, None)
    result = strategy.plan_with_measurements(
        model, devices, settings.cluster, settings.db, settings.options, progress
    )
    plan = result.plan
    progress.say(
        f"EdgePipe: {len(plan.stages)} stage(s) on {', '.join(plan.devices)} of "
        f"{len(devices)} device(s); predicted period {_ms(plan.period_s)} ms "
        f"({len(result.layers)} layers, searched in {result.search_s * 1e3:.1f} ms)"
    )
    candidates = []
    for name, parts in result.baselines.items():
        periods = [p.period_s for p in parts if math.isfinite(p.period_s)]
        best = min(periods, default=None)
        candidates.append(Candidate(f"{name} (best of {len(parts)} orders)", best))
    candidates.append(Candidate("edgepipe", plan.period_s))
    return PlanResult(plan, plan.period_s, tuple(candidates), {}, result)


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


def tables(result: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
    """The stages and the baselines' predicted periods."""
    return [stage_table(result.detail), baseline_table(result.detail)]


def plot(result: PlanResult, model: Model, devices: Sequence[DeviceSpec], path) -> Path:
    """Each stage's layers on its device."""
    from tvm_hetero.viz.pipeline_stages import plot_pipeline_stages

    title = f"{model.name}: EdgePipe on {len(devices)} devices"
    return plot_pipeline_stages(result.plan, result.detail.layers.labels, title, path)
