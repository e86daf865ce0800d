"""FlexPie planned, confirmed and tabled: what ``plan --strategy flexpie`` and ``optimize``
show."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.plan.flexpie import confirm_candidates, scores
from tvm_hetero.plan.spatial_plan import SpatialPlan
from tvm_hetero.strategies.base import Candidate, PlanResult, Progress
from tvm_hetero.strategies.flexpie import planner as strategy
from tvm_hetero.strategies.flexpie.confirm import ConfirmBuilds, confirm_by_measurement
from tvm_hetero.viz.tables import table


def plan_result(
    model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace, progress: Progress
) -> PlanResult:  # fmt: skip
    """Layers, their tiles under every scheme, the estimators' costs, the reverse DP; with
    ``settings.confirm`` the cheapest plans timed end to end, the fastest kept (and its build
    handed over: ResNet-18's took up to a minute to compile again)."""
    estimators = settings.estimators
    if not isinstance(estimators, strategy.Estimators):
        estimators = strategy.Estimators.load(estimators)
    progress.step("planning", 0, None)
    costs = progress.costs()  # a search ran the home device alone already
    result = strategy.plan_with_estimators(
        model, devices, settings.cluster, estimators, settings.db, settings.options,
        settings.max_run, progress, costs.run_s.get(devices[0].name) if costs else None,
    )  # fmt: skip
    plan = result.plan
    progress.say(
        f"FlexPie: {len(plan.segments)} segment(s) over {len(result.geometry)} layers on "
        f"{len(devices)} device(s); predicted {plan.predicted_s * 1e3:.3f} ms "
        f"(searched in {result.search_s * 1e3:.1f} ms); measured runtime costs: "
        f"{segment_costs(result.segment_s)} a tiled segment, {result.handoff_s * 1e3:.3f} ms "
        f"a piece; tiles priced x{result.compute_scale:.2f} (the home device alone, measured)"
    )
    if result.stale:
        progress.say(f"FlexPie: {result.stale}")
    compiled = None
    if settings.confirm:
        builds = ConfirmBuilds(model, devices, settings.options, settings.confirm_plans + 1)
        progress.step("confirming", 0, None)
        wanted = len(confirm_candidates(result.partitions(), settings.confirm_plans))
        result = confirm_by_measurement(
            result, model, devices, settings.confirm_plans, settings.options,
            progress=progress, build=builds, time_left=progress.time_left, costs=costs,
        )  # fmt: skip
        compiled = builds.take(result.plan)
        if len(result.confirmed_s) < wanted and wanted > 1:
            progress.say(
                f"confirmed {len(result.confirmed_s)} of {wanted} plans: its share of the "
                "budget ended the compiles or their timing"
            )
        elif not result.confirmed_s:
            progress.say("confirmed: no other plan to time (FlexPie's is the only one)")
    found = times(result)
    candidates = tuple(
        Candidate(name, seconds, result.confirmed_s.get(name)) for name, seconds in found.items()
    )
    return PlanResult(result.plan, result.partition.predicted_s, candidates, {}, result, compiled)


def tables(found: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
    """The segments, every strategy's predicted time and score, and what was confirmed."""
    result = found.detail
    out = [segment_table(result), baseline_table(result)]
    if result.confirmed_s:
        out.append(confirmed_table(result))
    return out


def confirmed_table(result: strategy.FlexPieResult):
    """Rich table: each plan timed end to end, its price and its measured median."""
    partitions = result.partitions()
    rows = [
        [name + (" (kept)" if name == result.kept else ""), partitions[name].predicted_s * 1e3,
         seconds * 1e3]
        for name, seconds in result.confirmed_s.items()
    ]  # fmt: skip
    cols = ["plan", "predicted ms", "measured ms"]
    return table("Confirmed end to end on the devices", cols, rows)


def segment_costs(segment_s: Mapping[str, float]) -> str:
    """``InH 1.52, Grid 2.69 ms``: what a segment cut in each scheme costs the runtime."""
    said = ", ".join(f"{scheme} {s * 1e3:.2f}" for scheme, s in segment_s.items())
    return f"{said} ms" if said else "nothing"


def segment_table(result: strategy.FlexPieResult):
    """Rich table: each segment's layers, scheme, modes and predicted move-in and compute."""
    rows = [
        [k, f"{s.start}-{s.stop - 1}", s.scheme, _modes(s.stop - s.start), s.move_in_s * 1e3,
         s.compute_s * 1e3]
        for k, s in enumerate(result.partition.segments)
    ]  # fmt: skip
    rows.append(["gather", "-", "Home", "-", result.partition.gather_s * 1e3, 0.0])
    cols = ["segment", "layers", "scheme", "mode", "move in ms", "compute ms"]
    return table(f"{result.plan.strategy}: {len(result.partition.segments)} segments", cols, rows)


def plan_table(plan: SpatialPlan):
    """Rich table of a saved plan: each segment's layers, scheme and operators."""
    rows = [
        [k, f"{first}-{last}" if plan.layers else "-", scheme, _modes(last - first + 1) if
         plan.layers else "-", len(ops)]
        for k, (ops, scheme, (first, last)) in enumerate(
            zip(plan.segments, plan.schemes, plan.layers or [(0, 0)] * len(plan.segments),
                strict=True)
        )
    ]  # fmt: skip
    title = f"{plan.strategy}: {len(plan.segments)} segments on {', '.join(plan.devices)}"
    return table(title, ["segment", "layers", "scheme", "mode", "ops"], rows)


def _modes(layers: int) -> str:
    return "T" if layers == 1 else f"{layers - 1} NT, T"


def times(result: strategy.FlexPieResult) -> dict[str, float]:
    """Predicted seconds of FlexPie and every baseline."""
    return {"flexpie": result.partition.predicted_s} | {
        n: p.predicted_s for n, p in result.baselines.items()
    }


def baseline_table(result: strategy.FlexPieResult):
    """Rich table: predicted time and the paper's performance score of every strategy."""
    found = times(result)
    score = scores(found)
    rows = [
        [name, found[name] * 1e3, len(p.segments), f"{score[name]:.2f}"]
        for name, p in [("flexpie", result.partition), *result.baselines.items()]
    ]
    cols = ["strategy", "predicted ms", "segments", "score"]
    return table("Predicted latency and score (best / each)", cols, rows)


def describe(plan: SpatialPlan, model: Model):
    """A saved FlexPie plan: its segments and schemes."""
    return plan_table(plan)


def plot(found: PlanResult, model: Model, devices: Sequence[DeviceSpec], path) -> Path:
    """Each layer's scheme, with every strategy's predicted time."""
    from tvm_hetero.viz.spatial_schemes import plot_spatial_schemes

    result = found.detail
    title = f"{model.name}: FlexPie on {len(devices)} devices"
    return plot_spatial_schemes(found.plan, len(result.geometry), title, path, times(result))
