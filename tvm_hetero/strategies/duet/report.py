"""DUET planned, tabled and drawn: what ``plan --strategy duet`` and ``optimize`` show."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan import duet
from tvm_hetero.plan.subgraph_plan import SubgraphPlan
from tvm_hetero.strategies.base import (
    Candidate,
    PlanResult,
    Progress,
    measured_counts,
    profiler_of,
    stop_if_exported,
)
from tvm_hetero.strategies.duet import planner as strategy
from tvm_hetero.viz.tables import table


def plan_result(
    model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace, progress: Progress
) -> PlanResult:  # fmt: skip
    """DUET's plan: subgraphs, their measured costs, the correction by end-to-end runs and the
    fallback, with one line on what was kept and why. With ``settings.offline`` it stops after
    each step that exported workloads for the box: the subgraphs and links first, then each
    pass of the correction with the single devices."""
    profiler = profiler_of(settings, progress)
    progress.step("subgraphs compiled and timed", 0, None)
    dg, costs = strategy.measure_costs(model, devices, profiler, progress, settings.cluster)
    stop_if_exported(settings, profiler)
    progress.step("end-to-end runs", 0, None)
    result = strategy.place(
        model, devices, dg, costs, profiler, settings.correction_runs, settings.trial_runs,
        progress, progress.time_left,
    )  # fmt: skip
    stop_if_exported(settings, profiler)
    progress.say(_outcome(result))
    plan, singles = result.plan, result.singles
    candidates = [
        Candidate(label, duet.predicted_s(costs, a)) for label, a in duet.baselines(costs).items()
    ]
    candidates += [Candidate(f"{n} alone", None, s) for n, s in singles.items()]
    candidates.append(Candidate(plan.strategy, plan.predicted_s, plan.measured_s))
    predicted = duet.predicted_s(costs, result.correction.assignment)
    return PlanResult(
        plan, plan.predicted_s or predicted, tuple(candidates), measured_counts(profiler), result
    )


def _outcome(result: strategy.DuetResult) -> str:
    """One line: what DUET kept against the fastest device alone it measured."""
    plan, singles = result.plan, result.singles
    runs = len(result.correction.trials)
    cut = f"its share of the budget ended the correction after {runs} run(s); "
    cut = cut if result.cut_short else ""
    best = min(singles, key=singles.__getitem__, default=None)
    if best is None:
        kept = "a split" if plan.strategy == "duet" else "one device"
        return f"{cut}DUET measured {plan.measured_s * 1e3:.3f} ms ({kept}), no device alone"
    if plan.strategy == "duet-fallback":
        return (
            f"{cut}fallback: no split measured faster than {best} alone "
            f"({singles[best] * 1e3:.3f} ms); the plan runs the model there"
        )
    return (
        f"{cut}DUET measured {plan.measured_s * 1e3:.3f} ms against {best} alone "
        f"{singles[best] * 1e3:.3f} ms ({singles[best] / plan.measured_s:.2f}x)"
    )


def subgraph_table(model, plan: SubgraphPlan, costs: duet.SubgraphCosts | None = None):
    """Rich table: each subgraph, its operators, its measured cost per device and its device."""
    graph = OpGraph.from_module(model.mod)
    dg = strategy.duet_graph(graph)
    names = list(plan.devices)
    cols = ["subgraph", "ops"]
    if costs is not None and costs.n_devices == len(names):
        cols += [f"{n} ms" for n in names]
    rows = []
    for s, nodes in enumerate(plan.subgraphs):
        row = [dg.label(s, graph) if dg.subgraphs == plan.subgraphs else f"s{s}", len(nodes)]
        if len(cols) > 2:
            row += [t * 1e3 for t in costs.seconds[s]]  # type: ignore[union-attr]
        rows.append([*row, names[plan.placement[s]]])
    phases = len(set(plan.phase))
    multi = sum(1 for p in set(plan.phase) if plan.phase.count(p) > 1)
    title = (
        f"{plan.strategy}: {len(plan.subgraphs)} subgraphs in {phases} phases ({multi} multi-path)"
    )
    return table(title, [*cols, "device"], rows)


def tables(found: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
    """The subgraphs with their costs, every measured trial and the baselines."""
    result = found.detail
    plan, costs, dg = result.plan, result.costs, result.graph
    names = [d.name for d in devices]
    shown = plan if len(plan.devices) == len(names) else strategy.to_plan(
        dg, devices, result.correction.assignment, "duet (not kept)"
    )  # fmt: skip
    out = [subgraph_table(model, shown, costs)]
    rows = [
        [f"{k + 1}", _compact(a, names), duet.predicted_s(costs, a) * 1e3, s * 1e3]
        for k, (a, s) in enumerate(result.correction.trials)
    ]
    out.append(
        table(
            f"Correction from {result.start} (measured end to end)",
            ["trial", "devices per subgraph", "predicted ms", "measured ms"],
            rows,
        )
    )
    rows = [[label, _compact(a, names), duet.predicted_s(costs, a) * 1e3, "-"]
            for label, a in duet.baselines(costs).items()]  # fmt: skip
    rows += [[f"{n} alone", "-", "-", s * 1e3] for n, s in result.singles.items()]
    rows.append([plan.strategy, "kept", "-", (plan.measured_s or 0) * 1e3])
    out.append(table("Baselines", ["placement", "devices", "predicted ms", "measured ms"], rows))
    return out


def plot(found: PlanResult, model: Model, devices: Sequence[DeviceSpec], path) -> Path:
    """The subgraphs of each phase on their devices, as the cost model schedules them."""
    from tvm_hetero.viz.subgraph_schedule import plot_subgraph_schedule

    result = found.detail
    graph = OpGraph.from_module(model.mod)
    slots, _ = duet.schedule(result.costs, result.correction.assignment)
    labels = [result.graph.label(s, graph) for s in range(len(result.graph.subgraphs))]
    names = ", ".join(d.name for d in devices)
    title = f"{model.name}: DUET on {names} ({result.plan.strategy} kept)"
    return plot_subgraph_schedule(slots, labels, [d.name for d in devices], title, path)


def _compact(assignment, names) -> str:
    """``0,1,1`` as device numbers; a single device by name."""
    used = duet.devices_used(assignment)
    return f"all {names[used[0]]}" if len(used) == 1 else ",".join(map(str, assignment))


def describe(plan: SubgraphPlan, model: Model):
    """A saved DUET plan: its subgraphs and their devices."""
    return subgraph_table(model, plan)
