"""EOP planned and tabled: what ``plan --strategy eop`` and ``optimize`` show."""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.plan.eop import SplitPlan
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.strategies.base import (
    Candidate,
    PlanResult,
    Progress,
    measured_counts,
    profiler_of,
    stop_if_exported,
)
from tvm_hetero.strategies.eop import planner as eop
from tvm_hetero.strategies.eop.confirm import confirm_by_measurement
from tvm_hetero.viz.tables import table


def plan_result(
    model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace, progress: Progress
) -> PlanResult:  # fmt: skip
    """EOP's plan and every baseline's predicted time; with ``settings.confirm`` (outside a
    search, which times every plan and each device alone itself) the plan and each device alone
    timed end to end and the fastest kept."""
    inputs, profiler = measure(model, devices, settings, progress)
    every = plans(inputs, settings.span)
    best = every["eop"]
    progress.say(f"planning took {best.notes['plan_s'] * 1e3:.1f} ms")
    measured: dict[str, float] = {}
    offline = getattr(profiler.runner, "offline", False)
    if settings.confirm and not offline and progress.costs() is None:
        progress.step("timing the plan and each device alone end to end", 0, None)
        best, measured = confirm_by_measurement(model, devices, every, settings.options)
        if measured:
            timed = ", ".join(f"{name} {s * 1e3:.3f} ms" for name, s in measured.items())
            progress.say(f"measured end to end: {timed} -> kept {best.strategy}")
    candidates = tuple(
        Candidate(f"{name} ({', '.join(p.devices)})", p.predicted_s, measured.get(name))
        for name, p in every.items()
    )  # fmt: skip
    return PlanResult(best, best.predicted_s, candidates, measured_counts(profiler), inputs)


def measure(
    model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace, progress: Progress
) -> tuple[eop.EopInputs, Profiler]:  # fmt: skip
    """Profile what EOP needs (records are reused from ``settings.db``). With
    ``settings.offline`` and no results yet, every cuttable operator is swept (the key
    operators are chosen from times the box has not taken) and the workloads exported."""
    profiler = profiler_of(settings, progress)
    exporting = getattr(profiler.runner, "offline", False) and not profiler.runner.measured
    key_share = 1.0 if exporting else settings.key_share

    def step(node: str, done: int, total: int) -> None:
        progress.step(f"sweeping {node}", done, total)

    inputs = eop.measure_inputs(
        model, devices, profiler, key_share, settings.samples, step,
        None if exporting else progress.time_left, progress.costs(),
    )  # fmt: skip
    stop_if_exported(settings, profiler)
    cut = len(inputs.unswept)
    cut_short = f" ({cut} more left whole: its share of the budget ended the sweeps)" if cut else ""
    progress.say(
        f"{len(inputs.keys)} key operators{cut_short}; {profiler.misses} workloads measured, "
        f"{profiler.hits} from {profiler.db.path}"
    )
    return inputs, profiler


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


def tables(result: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
    """The key operators' cuts, every baseline's predicted time and the fitted patterns."""
    rows = [[c.name, c.predicted_s * 1e3] for c in result.candidates]
    return [
        split_table(result.plan),
        table("Predicted AT(G, R), ms", ["strategy (devices, home first)", "ms"], rows),
        fits_table(result.detail.fits),
    ]


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


def describe(plan: SplitPlan, model: Model):
    """A saved EOP plan: its key operators' cuts."""
    return split_table(plan)


def plot(result: PlanResult, model: Model, devices: Sequence[DeviceSpec], path) -> Path:
    """Each key operator's cut and predicted times."""
    from tvm_hetero.viz.splits import plot_split_plan

    return plot_split_plan(result.plan, model.name, Path(path))
