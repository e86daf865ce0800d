"""FlexPie's plan confirmed end to end: it and the next-cheapest plans timed on the devices, the
fastest kept.

The estimators price each tile alone and the runtime's overheads per piece and per segment from
probes; tiles of a segment running at the same time on devices that share a machine, a link or
a client can undo a predicted gain. On the emulated ring of four at 1 Gbit/s (Zen 5, MobileNet)
FlexPie's plan was priced 14.4 ms and ran 22.1 while the home device alone ran 19.6 and fused
rows 18.9. Timing a few candidates the way the plan will run catches that, as ``--confirm``
does for Lee et al.'s plan (and DUET falls back to the best single device).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.plan.flexpie import confirm_candidates
from tvm_hetero.plan.spatial_plan import SpatialPlan
from tvm_hetero.runtime.deployment import Deployment
from tvm_hetero.strategies.base import Pace, SearchCosts
from tvm_hetero.strategies.flexpie.planner import FlexPieResult, Progress, to_plan

if TYPE_CHECKING:
    from tvm_hetero.build.compiled import CompiledModel

ROUNDS, WARMUP = 3, 5
"""The confirmation's interleaved rounds and the untimed runs of each plan's first turn."""
CONFIRM_PLANS = 3
"""Plans timed by default: FlexPie's and the two cheapest other ones (the home device alone is
timed besides)."""


def confirm_by_measurement(
    result: FlexPieResult, model: Model, devices: Sequence[DeviceSpec],
    plans: int = CONFIRM_PLANS, options: BuildOptions | None = None, repeat: int = 15,
    progress: Progress | None = None,
    build: Callable[[SpatialPlan], Deployment | Path] | None = None,
    time_left: Callable[[], float | None] | None = None, costs: SearchCosts | None = None,
) -> FlexPieResult:  # fmt: skip
    """Compile FlexPie's plan, the ``plans - 1`` cheapest other ones by price (distinct) and the
    home device alone (:func:`~tvm_hetero.plan.flexpie.confirm_candidates`), run them on the
    devices in interleaved rounds (``repeat`` runs each, after a warm-up; a slow spell of the
    machine falls on all) and keep the fastest by median. ``build`` compiles a plan (default
    :class:`ConfirmBuilds`: ``api.compile`` for the devices in the plan's order; a benchmark
    passes its kept builds). With ``time_left`` (seconds, None for no limit) no compile starts
    after FlexPie's own that would end past it with the first turns of timing it and those
    before it (its warm-up, :data:`WARMUP` runs or a second's, and a round's runs, each as
    long as its price), by the compiles' average so far; those not compiled are not timed. No
    round of timing starts that would end past it either, and of the first no plan's turn once
    two are timed: ViT-Base's four plans on the emulated mesh took 243 s to time, 133 s past
    FlexPie's share of a six-minute search, each turn on the shared workers a library loaded
    and warmed up again; ViT-Large's first two turns, a 1.2 GB library sent to each worker a
    plan, 229 s. With a search's ``costs`` (:class:`~tvm_hetero.strategies.base.SearchCosts`)
    FlexPie's own compile is priced too, as long as the search's, and each turn with its
    loads on the plan's devices; where FlexPie's own plan and its turn would not fit it is
    returned untimed (the search compiles and times it after planning, as it does every
    plan).

    Returns
    -------
    FlexPieResult
        ``result`` with ``plan`` and ``partition`` the kept plan's (its strategy ``flexpie``,
        or ``flexpie-NAME`` when the baseline ``NAME`` ran faster; ``kept`` names it) and
        ``confirmed_s`` each timed plan's median seconds; ``result`` itself when one plan or none
        is a candidate.
    """
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    build = build or ConfirmBuilds(model, devices, options)
    partitions = result.partitions()
    names = confirm_candidates(partitions, plans)
    if len(names) < 2:
        return result
    plans_of = {name: to_plan(result.geometry, devices, partitions[name], name) for name in names}
    deployments, pace = [], Pace(time_left, costs.compile_s if costs else None)
    runs, loads = -(-repeat // ROUNDS), costs or SearchCosts(0.0, {})  # no search: no loads
    turns_s = [
        loads.turn_s(plans_of[name].devices, partitions[name].predicted_s, WARMUP, runs)
        for name in names
    ]
    for k, name in enumerate(names):
        if not pace.room(after=sum(turns_s[: k + 1])):
            names = names[:k]
            break
        if progress:
            progress(f"compiling {name} to time it", k, len(names) + 1)
        with pace.piece():
            deployments.append(build(plans_of[name]))
    if len(names) < 2:
        return result
    if progress:
        progress(f"timing {len(names)} plans end to end", len(names), len(names) + 1)
    left = time_left() if time_left else None
    deadline = None if left is None else time.monotonic() + left
    samples = interleaved_run_seconds(
        deployments, [repeat] * len(names), ROUNDS, WARMUP, deadline=deadline, least=2
    )
    seconds = {name: statistics.median(s) for name, s in zip(names, samples, strict=True) if s}
    timed = dataclasses.replace(result, confirmed_s=seconds)
    kept = timed.kept  # the fastest
    if progress:
        progress("confirmed", len(names) + 1, len(names) + 1)
    strategy = "flexpie" if kept == "flexpie" else f"flexpie-{kept}"
    plan = to_plan(result.geometry, devices, partitions[kept], strategy)
    return dataclasses.replace(timed, plan=plan, partition=partitions[kept])


class ConfirmBuilds:
    """The confirmation's default ``build``: compiles each plan it times for the devices in the
    plan's order and keeps it by partition, so that ``compile --strategy flexpie`` writes the
    kept one as it was timed (:meth:`take`) instead of compiling it again. Builds of a model
    too large to hold ``count`` of are saved and timed apart instead
    (:class:`~tvm_hetero.build.held.HeldBuilds`); the kept one is then compiled again."""

    def __init__(
        self, model: Model, devices: Sequence[DeviceSpec], options: BuildOptions | None,
        count: int = CONFIRM_PLANS + 1,
    ) -> None:  # fmt: skip
        from tvm_hetero.build.held import HeldBuilds

        self.model, self.devices, self.options = model, devices, options
        self.held = HeldBuilds(model, count)

    def __call__(self, plan: SpatialPlan) -> Deployment | Path:
        from tvm_hetero.build.compiled import compile_model, in_plan_order

        used = in_plan_order(self.devices, plan)
        timed = self.held.add(_partition_key(plan), compile_model(self.model, used, plan,
                                                                  self.options))  # fmt: skip
        self.held.dropped()
        return timed

    def take(self, plan: SpatialPlan) -> CompiledModel | None:
        """The ``CompiledModel`` of ``plan``'s partition, named as ``plan`` (the confirmation
        compiled a baseline under its own name), or ``None`` (also when it was saved, not
        held); the others are dropped."""
        found = self.held.compiled(_partition_key(plan))
        self.held.close()
        if found is None:
            return None
        deployment = dataclasses.replace(found.deployment, plan=plan.to_dict())
        return dataclasses.replace(found, deployment=deployment, placement=plan)


def _partition_key(plan: SpatialPlan) -> str:
    """What makes two plans the same build: everything but their strategy's name."""
    return json.dumps({k: v for k, v in plan.to_dict().items() if k != "strategy"})
