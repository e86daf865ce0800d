"""DUET from the command line: ``plan --strategy duet`` and ``compile --strategy duet``."""

from __future__ import annotations

import argparse

from tvm_hetero.cli.common import (
    console,
    profiler_from_args,
    progress_bar,
    progress_of,
    stop_if_exported,
    table,
    write_plan,
)
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan import duet
from tvm_hetero.plan.subgraph_plan import SubgraphPlan
from tvm_hetero.strategies import duet as strategy


def make_plan(args: argparse.Namespace, model, devices) -> SubgraphPlan:
    """Phases, compiler-aware costs, greedy correction by measured runs, fallback."""
    return _plan(args, model, devices).plan


def _plan(args: argparse.Namespace, model, devices) -> strategy.DuetResult:
    return plan_and_say(model, devices, profiler_from_args(args), args.budget, args)


def plan_and_say(
    model, devices, profiler, budget: int, args: argparse.Namespace | None = None
) -> strategy.DuetResult:  # fmt: skip
    """DUET's plan with a progress bar, and one line on what was kept and why. With ``args``
    naming ``--offline``, it stops after each step that exported workloads for the box: the
    subgraphs and links first, then each pass of the correction with the single devices."""
    with progress_bar() as bar:
        progress = progress_of(bar, "subgraphs compiled and timed")
        dg, costs = strategy.measure_costs(model, devices, profiler, progress)
    if args is not None:
        stop_if_exported(args, profiler)
    with progress_bar() as bar:
        progress = progress_of(bar, "end-to-end runs")
        result = strategy.place(model, devices, dg, costs, profiler, budget, progress=progress)
    if args is not None:
        stop_if_exported(args, profiler)
    plan, singles = result.plan, result.singles
    best = min(singles, key=singles.__getitem__)
    if plan.strategy == "duet-fallback":
        console().print(
            f"[bold]fallback[/]: no split measured faster than {best} alone "
            f"({singles[best] * 1e3:.3f} ms); the plan runs the model there"
        )
    else:
        console().print(
            f"DUET measured {plan.measured_s * 1e3:.3f} ms against {best} alone "
            f"{singles[best] * 1e3:.3f} ms ({singles[best] / plan.measured_s:.2f}x)"
        )
    return result


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


def report(result: strategy.DuetResult, model, devices, budget: int) -> None:
    """Print the subgraphs with their costs, every measured trial and the baselines."""
    plan, costs, dg = result.plan, result.costs, result.graph
    names = [d.name for d in devices]
    shown = plan if len(plan.devices) == len(names) else strategy.to_plan(
        dg, devices, result.correction.assignment, "duet (not kept)"
    )  # fmt: skip
    console().print(subgraph_table(model, shown, costs))
    rows = [
        [f"{k + 1}", _compact(a, names), duet.predicted_s(costs, a) * 1e3, s * 1e3]
        for k, (a, s) in enumerate(result.correction.trials)
    ]
    console().print(
        table(
            f"Correction from {result.start} (measured end to end, budget {budget})",
            ["trial", "devices per subgraph", "predicted ms", "measured ms"],
            rows,
        )
    )
    rows = [[label, _compact(a, names), duet.predicted_s(costs, a) * 1e3, "-"]
            for label, a in duet.baselines(costs).items()]  # fmt: skip
    rows += [[f"{n} alone", "-", "-", s * 1e3] for n, s in result.singles.items()]
    rows.append([plan.strategy, "kept", "-", (plan.measured_s or 0) * 1e3])
    console().print(
        table("Baselines", ["placement", "devices", "predicted ms", "measured ms"], rows)
    )


def run_plan(args: argparse.Namespace, model, devices) -> int:
    """``tvm-hetero plan MODEL --strategy duet``: plan, compare with baselines, write, plot."""
    result = _plan(args, model, devices)
    report(result, model, devices, args.budget)
    plan, costs, dg = result.plan, result.costs, result.graph
    names = [d.name for d in devices]
    write_plan(args, plan, model)
    if args.plot:
        from tvm_hetero.viz.subgraph_schedule import plot_subgraph_schedule

        graph = OpGraph.from_module(model.mod)
        slots, _ = duet.schedule(costs, result.correction.assignment)
        labels = [dg.label(s, graph) for s in range(len(dg.subgraphs))]
        title = f"{model.name}: DUET on {', '.join(names)} ({plan.strategy} kept)"
        console().print(f"wrote {plot_subgraph_schedule(slots, labels, names, title, args.plot)}")
    return 0


def _compact(assignment, names) -> str:
    """``0,1,1`` as device numbers; a single device by name."""
    used = duet.devices_used(assignment)
    return f"all {names[used[0]]}" if len(used) == 1 else ",".join(map(str, assignment))
