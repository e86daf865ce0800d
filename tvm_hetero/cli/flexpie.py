"""FlexPie from the command line: ``plan --strategy flexpie`` and ``compile --strategy
flexpie`` (``--cluster FILE`` gives the devices and the links; ``--estimators DIR`` the trained
estimators, default the shipped ones)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tvm_hetero.cli.common import (
    build_options,
    console,
    progress_bar,
    progress_of,
    table,
    write_plan,
)
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.plan.flexpie import scores
from tvm_hetero.plan.spatial_plan import SpatialPlan
from tvm_hetero.strategies import flexpie as strategy
from tvm_hetero.strategies.flexpie_confirm import ConfirmBuilds, confirm_by_measurement

if TYPE_CHECKING:
    from tvm_hetero.api import CompiledModel


def make_plan(args: argparse.Namespace, model, devices) -> SpatialPlan:
    """Layers, their tiles under every scheme, the estimators' costs, the reverse DP."""
    return _plan(args, model, devices).plan


def plan_and_build(
    args: argparse.Namespace, model, devices
) -> tuple[SpatialPlan, CompiledModel | None]:
    """``compile --strategy flexpie``: the plan, and its ``CompiledModel`` when the
    confirmation compiled it (else ``None``): ResNet-18's took up to a minute to compile again."""
    builds = ConfirmBuilds(model, devices, build_options(args))
    plan = _plan(args, model, devices, builds).plan
    return plan, builds.take(plan)


def _plan(
    args: argparse.Namespace, model, devices, build: ConfirmBuilds | None = None
) -> strategy.FlexPieResult:
    cluster = ClusterSpec.load(args.cluster) if args.cluster else None
    estimators = strategy.Estimators.load(args.estimators)
    options = build_options(args)
    with progress_bar() as bar:
        result = strategy.plan_with_estimators(
            model, devices, cluster, estimators, args.db, options, args.max_run,
            progress_of(bar, "planning"),
        )  # fmt: skip
    plan = result.plan
    console().print(
        f"FlexPie: {len(plan.segments)} segment(s) over {len(result.geometry)} layers on "
        f"{len(devices)} device(s); predicted {plan.predicted_s * 1e3:.3f} ms "
        f"(searched in {result.search_s * 1e3:.1f} ms); measured runtime costs: "
        f"{segment_costs(result.segment_s)} a tiled segment, {result.handoff_s * 1e3:.3f} ms "
        "a piece"
    )
    if args.confirm:
        with progress_bar() as bar:
            result = confirm_by_measurement(
                result, model, devices, args.confirm_plans, options,
                progress=progress_of(bar, "confirming"), build=build,
            )  # fmt: skip
        if result.confirmed_s:
            console().print(confirmed_table(result))
        else:
            console().print("confirmed: no other plan to time (FlexPie's is the only one)")
    return result


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


def run_plan(args: argparse.Namespace, model, devices) -> int:
    """``tvm-hetero plan MODEL --strategy flexpie``: plan, compare, write, draw."""
    result = _plan(args, model, devices)
    console().print(segment_table(result))
    console().print(baseline_table(result))
    write_plan(args, result.plan, model)
    if args.plot:
        from tvm_hetero.viz.spatial_schemes import plot_spatial_schemes

        title = f"{model.name}: FlexPie on {len(devices)} devices"
        path = plot_spatial_schemes(result.plan, len(result.geometry), title, args.plot,
                                    times(result))  # fmt: skip
        console().print(f"wrote {path}")
    return 0
