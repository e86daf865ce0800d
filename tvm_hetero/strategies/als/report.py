"""Lee et al. planned, tabled and drawn: what ``plan --strategy als`` and ``optimize`` show."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.plan.als import priority_assignment, priority_orders, total_time
from tvm_hetero.plan.dcg import DCG
from tvm_hetero.plan.placement import Placement
from tvm_hetero.strategies.als import planner as als
from tvm_hetero.strategies.base import (
    Candidate,
    PlanResult,
    Progress,
    measured_counts,
    profiler_of,
    stop_if_exported,
)
from tvm_hetero.viz.tables import table


def plan_result(
    model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace, progress: Progress
) -> PlanResult:  # fmt: skip
    """The fewest profiling runs, executed; the optimal assignment, guarded and confirmed."""
    profiler = profiler_of(settings, progress)
    offline = getattr(profiler.runner, "offline", False)
    if offline and settings.confirm:
        progress.say("--offline: the plan is not confirmed end to end (nothing runs here)")
    progress.step("executing the profiling runs", 0, None)
    result = als.plan_with_runs(
        model, devices, settings.options, settings.pim, settings.exact, settings.min_gain,
        settings.confirm and not offline, profiler, progress,
        None if offline else progress.time_left, progress.costs(),
    )  # fmt: skip
    stop_if_exported(settings, profiler)
    if result.confirm_s:
        s = result.confirm_s
        progress.say(
            f"measured end to end: plan {s['plan'] * 1e3:.3f} ms, best baseline "
            f"{s['baseline'] * 1e3:.3f} ms -> kept {result.plan.strategy}"
        )
    progress.say(
        f"{len(result.runs)} profiling runs measured {len(result.dcg.ops)} operators and "
        f"{len(result.dcg.da_edges())} DA edges; planning took {result.plan_s * 1e3:.1f} ms"
    )
    names = [d.name for d in devices]
    candidates = [
        Candidate(label, total_time(result.dcg, result.costs, assignment))
        for label, assignment in _baselines(result.dcg, names)
    ]
    measured = result.confirm_s.get("plan")
    candidates.append(Candidate(result.plan.strategy, result.plan.predicted_s, measured))
    return PlanResult(
        on_devices_used(result.plan, result.dcg), result.plan.predicted_s, tuple(candidates),
        measured_counts(profiler), result,
    )  # fmt: skip


def on_devices_used(plan: Placement, dcg: DCG) -> Placement:
    """``plan`` naming only the device it puts every operator on, where it uses one (as DUET's
    plans do): ``optimize`` then takes it for that device alone, not for a plan over several
    to compile and time again (Lee et al. over two alike cores keep one since their prices
    are pooled: ``planner.pooled_by_class``)."""
    used = {plan.device_of(o) for o in dcg.ops}
    if len(used) != 1:
        return plan
    return Placement((plan.devices[used.pop()],), {}, plan.strategy, plan.predicted_s)


def tables(result: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
    """Predicted time of every baseline and the plan; operators per device."""
    plan, dcg = result.detail.plan, result.detail.dcg
    rows = [[c.name, c.predicted_s * 1e3] for c in result.candidates]
    names = [d.name for d in devices]
    counts = [[n, sum(1 for o in dcg.ops if plan.device_of(o) == i)] for i, n in enumerate(names)]
    return [
        table("Predicted time (ms, one operator at a time)", ["assignment", "ms"], rows),
        table(
            f"{plan.strategy}: operators per device ({plan.predicted_s * 1e3:.3f} ms)",
            ["device", "operators"],
            counts,
        ),
    ]


def plot(
    result: PlanResult, model: Model, devices: Sequence[DeviceSpec], path: str | Path
) -> Path:  # fmt: skip
    """Each device's operators on a timeline, as the cost model sees them."""
    from tvm_hetero.viz.timeline import plot_timeline

    plan, dcg, costs = result.detail.plan, result.detail.dcg, result.detail.costs
    assignment = {o: plan.device_of(o) for o in dcg.ops}
    return plot_timeline(dcg, costs, assignment, f"{model.name}: {plan.strategy}", Path(path))


def _baselines(dcg, names):
    """Each device first, the rest in list order (ONNX-Runtime-style priorities)."""
    for order in priority_orders(len(names)):
        yield f"priority ({', '.join(names[j] for j in order)})", priority_assignment(dcg, order)
