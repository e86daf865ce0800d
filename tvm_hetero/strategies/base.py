"""What every strategy offers: the :class:`Strategy` a package exposes and the
:class:`PlanResult` its ``plan`` returns.

A strategy is one package, ``tvm_hetero/strategies/<name>/``, whose ``__init__`` defines one
:class:`Strategy` object, ``STRATEGY``, and imports no TVM (``tvm-hetero --help`` builds every
strategy's flags); its planner, report and chart load when they are used. ``plan``, ``compile
--strategy`` and ``optimize`` see a strategy only through this class, so a new one is a package
and a line in :mod:`tvm_hetero.strategies.registry`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tvm_hetero.build.multi_device import BuildOptions
    from tvm_hetero.devices.cluster import ClusterSpec
    from tvm_hetero.devices.spec import DeviceSpec
    from tvm_hetero.frontends.model import Model
    from tvm_hetero.plan.registry import Plan
    from tvm_hetero.profiling.profiler import Profiler

OBJECTIVES = ("latency", "throughput")
"""What a plan minimises: one request's time, or the time between requests of a stream."""


class Progress:
    """Where a strategy reports while it works: ``step`` as work advances, ``say`` for a line
    the user should read (what was merged, kept or fell back). This one says nothing; the
    command line's draws a bar and prints."""

    def step(self, what: str, done: int, total: int | None) -> None:
        """``done`` of ``total`` pieces of work finished, now doing ``what``."""

    def say(self, text: str) -> None:
        """One line for the user."""

    def costs(self) -> SearchCosts | None:
        """What the search measured here before planning (:class:`SearchCosts`), for a
        strategy that compiles and times plans itself to price them; None outside a search."""
        return None

    def time_left(self) -> float | None:
        """Seconds left of the strategy's share of a search's budget; None without a budget.

        A strategy that reads it winds down by itself: it starts no measurement that would not
        end in time and returns its best plan so far. The search then stops it only once it is
        a whole share late, where it stops one that never reads it at its first report past
        the share."""
        return None

    def __call__(self, what: str, done: int, total: int | None) -> None:
        """Planners take a plain ``progress(what, done, total)``: this object is one."""
        self.step(what, done, total)


@dataclass(frozen=True)
class SearchCosts:
    """What a search measured before its strategies plan, compiling each device alone and
    running it once: a compile of the model here (the mean of those compiles), loading a
    build on each device (on a cluster's worker: the library sent and loaded) and that run,
    seconds by device name. A strategy that compiles and times plans itself prices them by these
    (FlexPie's confirmation: on the emulated ring of three, each turn of a ViT-Large plan
    loaded a 1.2 GB library on three workers, 40-57 s, where it had priced a turn 7 s of
    runs and timed three plans 106 s past its share)."""

    compile_s: float
    load_s: Mapping[str, float]
    run_s: Mapping[str, float] = field(default_factory=dict)

    def turn_s(self, devices: Iterable[str], run_s: float, warmup: int, runs: int) -> float:
        """Seconds of a plan's first turn of timing on ``devices`` (by name): loading it on
        each, one after the other, then its warm-up and ``runs`` runs of ``run_s``
        (:func:`~tvm_hetero.runtime.stats.first_turn_s`)."""
        from tvm_hetero.runtime.stats import first_turn_s

        loads = sum(self.load_s.get(name, 0.0) for name in set(devices))
        return loads + first_turn_s(run_s, warmup, runs)

    def profiling_runs_s(self, count: int, repeats: int) -> float:
        """Seconds of ``count`` profiling runs of the whole model, each a build of its own and
        a warm-up and ``repeats`` timed runs: a compile and runs as long as the slowest device's
        alone each. A lower bound: built without fusion and timed operator by operator, one of
        timm's SAM2 Hiera-Tiny took 27 s where this says 16 (AMD Zen 4)."""
        run_s = max(self.run_s.values(), default=0.0)
        return count * (self.compile_s + (1 + repeats) * run_s)


class OutOfTime(Exception):
    """A strategy in a search stopped before it began measuring what any plan of it needs:
    that could not end before the search would stop it (:func:`check_time`). The
    search says so and goes on; a larger ``--budget`` or a database that holds the records
    lets it plan."""


def check_time(time_left: Callable[[], float | None] | None, need_s: float, what: str) -> None:
    """Raise :class:`OutOfTime` where ``need_s`` seconds of ``what`` could not end before the
    search stops the strategy: a strategy that reads its time left (``time_left()``, None or a
    None answer: no limit) is stopped a whole share late, so at most twice the time left.
    ``need_s`` is a lower bound: past that, starting only wastes the budget. Before, a
    strategy stopped only at its first report past its share: on SAM2 Hiera-Tiny, whose run
    takes two seconds a core, Lee et al.'s first profiling run and EOP's runs of each device
    took a three-minute search 142 s past its budget."""
    left = time_left() if time_left is not None and need_s > 0 else None
    if left is not None and need_s > 2 * left:
        raise OutOfTime(
            f"{what} would take {need_s:.0f} s or more here, and {max(left, 0.0):.0f} s "
            "of its share are left"
        )


class Pace:
    """Pieces of a strategy's work (a compile, a sweep, an end-to-end run), timed as they run
    against its time left (:meth:`Progress.time_left`, or None without a budget).
    ``first_s``: what the first piece is expected to take (a search's compile), or None."""

    def __init__(
        self, time_left: Callable[[], float | None] | None, first_s: float | None = None
    ) -> None:  # fmt: skip
        self.time_left, self.pieces, self.spent_s = time_left, 0, 0.0
        self.first_s = first_s

    def room(self, after: float = 0.0) -> bool:
        """Whether one more piece, as long as the average so far, and ``after`` seconds of
        work that must follow it would end in time (the first always would without
        ``first_s``: there is nothing to go by)."""
        piece_s = self.spent_s / self.pieces if self.pieces else self.first_s
        left = self.time_left() if self.time_left and piece_s is not None else None
        return left is None or left >= piece_s + after  # type: ignore[operator]

    @contextlib.contextmanager
    def piece(self) -> Iterator[None]:
        """Time one piece (counted when it ends)."""
        began = time.monotonic()
        yield
        self.spent_s += time.monotonic() - began
        self.pieces += 1


class _Callback(Progress):
    """A plain ``progress(what, done, total)`` function as a :class:`Progress`."""

    def __init__(self, call: Callable[[str, int, int | None], None]) -> None:
        self.call = call

    def step(self, what: str, done: int, total: int | None) -> None:
        self.call(what, done, total)


ProgressLike = Progress | Callable[[str, int, int | None], None] | None
"""What the Python interface takes as ``progress``: a :class:`Progress`, a plain function of
``(what, done, total)``, or None for silence."""


def as_progress(given: ProgressLike) -> Progress:
    """``given`` as a :class:`Progress`: itself, a function's wrapper, or a silent one."""
    if isinstance(given, Progress):
        return given
    return Progress() if given is None else _Callback(given)


@dataclass(frozen=True)
class Candidate:
    """One way to run the model that a strategy weighed (or ``optimize`` timed).

    Attributes
    ----------
    name : str
        What it is: ``duet``, ``priority (cpu@0, cpu@1)``, ``cpu@0 alone``.
    predicted_s : float | None
        The planner's predicted seconds (a period for a throughput plan); None when unpriced.
    measured_s : float | None
        Median seconds measured end to end, when it was timed.
    note : str
        Why it was dropped or kept, when there is something to say.
    """

    name: str
    predicted_s: float | None = None
    measured_s: float | None = None
    note: str = ""


@dataclass(frozen=True)
class PlanResult:
    """What a strategy's ``plan`` returns.

    Attributes
    ----------
    plan : Plan
        The plan (:mod:`tvm_hetero.plan.registry`), saved with ``-o`` and compiled by ``api``.
    predicted_s : float | None
        The kept plan's predicted seconds (a period for a throughput plan).
    candidates : tuple[Candidate, ...]
        What the strategy weighed: its baselines and alternatives, with their predicted (and, when
        it confirmed them, measured) times.
    measured : dict[str, int]
        What it measured: ``{"workloads timed": n, "records reused": m, ...}``.
    detail : Any
        The strategy's own result, for its report and chart.
    compiled : Any
        The kept plan's ``CompiledModel`` when confirming built it (else None).
    """

    plan: Plan
    predicted_s: float | None
    candidates: tuple[Candidate, ...] = ()
    measured: dict[str, int] = field(default_factory=dict)
    detail: Any = field(default=None, repr=False)
    compiled: Any = field(default=None, repr=False)


class Strategy:
    """One planner as ``plan``, ``compile --strategy`` and ``optimize`` offer it.

    Attributes
    ----------
    name : str
        The ``--strategy`` value and the registry's key.
    help : str
        One line for ``--help``.
    plan_kind : str
        The ``kind`` of its plans (:data:`tvm_hetero.plan.registry.PLAN_KINDS`).
    objective : str
        What its plans minimise (:data:`OBJECTIVES`).
    offline : bool
        Whether it can plan for devices reached only offline (``--offline``: every measurement
        goes through the profiler).
    default_devices : tuple[str, ...]
        Devices when none are given.
    module : str
        The module that does the work, loaded on use (it imports TVM): ``plan_result(model,
        devices, settings, progress)``, and optionally ``tables(result, model, devices)``,
        ``plot(result, model, devices, path)`` and ``describe(plan, model)``. A strategy may
        override the methods instead.
    """

    name: str = ""
    help: str = ""
    plan_kind: str = ""
    objective: str = "latency"
    offline: bool = False
    default_devices: tuple[str, ...] = ("cpu@0", "cpu@1")
    module: str = ""

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        """Add this strategy's own flags to ``group`` (the shared ones, ``--db``,
        ``--offline``, ``--confirm``, ``--cluster``, are the command's)."""

    def applicable(
        self, model: Model, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None
    ) -> str | None:  # fmt: skip
        """None when this strategy can plan ``model`` on ``devices``; else why not, in words.
        Every plan is cut into units, which need each shape known from the inputs: a model
        that computes one itself (:func:`~tvm_hetero.ir.units.shape_computed_inside`) is
        refused here, before any measuring (transformers' JetMoE, its experts' rows split by
        sizes its router computes: Lee et al. and EOP measured for 85 s of a three-minute
        search and failed to build, DUET failed inside TVM)."""
        if len(devices) < 2:
            return "one device: nothing to spread"
        from tvm_hetero.ir.attrs import ENTRY_FUNC
        from tvm_hetero.ir.units import shape_computed_inside

        inside = shape_computed_inside(model.mod[ENTRY_FUNC])
        if inside is not None:
            return (
                f"the model computes shapes at run time ({inside!r}: sizes read from a "
                "tensor), and a plan over several devices needs them known at its cuts"
            )
        return None

    def plan(
        self, model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace,
        progress: Progress,
    ) -> PlanResult:  # fmt: skip
        """Measure what the planner needs (records shared through ``settings.db``) and plan:
        :attr:`module`'s ``plan_result``."""
        return self._module().plan_result(model, devices, settings, progress)

    def report(self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
        """Tables (rich renderables) that show the plan and what it was weighed against:
        :attr:`module`'s ``tables``, when it has one."""
        found = getattr(self._module(), "tables", None) if self.module else None
        return found(result, model, devices) if found else []

    def plot(
        self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec], path: str | Path
    ) -> Path | None:  # fmt: skip
        """Draw the plan to ``path`` (:attr:`module`'s ``plot``); None without a chart."""
        found = getattr(self._module(), "plot", None) if self.module else None
        return found(result, model, devices, path) if found else None

    def describe(self, plan: Plan, model: Model) -> Any:
        """A table of ``plan`` alone (a saved one, as ``compile --plan`` shows it):
        :attr:`module`'s ``describe``, by default each device's operators, FLOPs, copies."""
        found = getattr(self._module(), "describe", None) if self.module else None
        return found(plan, model) if found else placement_table(model, plan)

    def _module(self) -> ModuleType:
        if not self.module:
            raise NotImplementedError(f"strategy {self.name!r} names no module and has no plan")
        return importlib.import_module(self.module)

    def settings(self, **given: Any) -> argparse.Namespace:
        """Settings for :meth:`plan`: every flag's default (this strategy's and the shared
        ones), then ``given``; a name no flag has is refused with the names allowed."""
        parser = argparse.ArgumentParser(add_help=False)
        add_shared_arguments(parser)
        self.add_arguments(parser.add_argument_group(self.name))
        defaults = parser.parse_args([])
        defaults.options, defaults.cluster = None, None
        unknown = sorted(set(given) - set(vars(defaults)))
        if unknown:
            raise ValueError(
                f"strategy {self.name!r}: no setting {', '.join(unknown)}; it takes "
                f"{', '.join(sorted(vars(defaults)))}"
            )
        return argparse.Namespace(**{**vars(defaults), **given})


WHOLE_RUNS = 30
"""Runs of the whole model on each device alone that level a strategy's model of the device to
what it runs (EOP's ``_level``, Lee et al.'s ``fused_scales``): :func:`alone_seconds`."""
RUNS_WITHIN_S = 10.0
"""In a search, each device's runs of the whole model take about this long at most (five runs
at least): thirty of timm's SAM2 Hiera-Tiny took 70 s a device, twice EOP's share of a
three-minute search."""


def alone_seconds(
    profiler: Profiler, model: Model, device: DeviceSpec, costs: SearchCosts | None = None
) -> float:  # fmt: skip
    """The median of :data:`WHOLE_RUNS` runs of ``model``'s fused build on ``device`` alone
    (``Profiler.profile_run``: kept in the profile database, so strategies share it), or in a
    search as many as fit in :data:`RUNS_WITHIN_S` by the search's run of it (``costs``)."""
    from tvm_hetero.plan.placement import Placement
    from tvm_hetero.runtime.stats import runs_within

    n = runs_within(RUNS_WITHIN_S, costs.run_s.get(device.name) if costs else None, WHOLE_RUNS)
    return profiler.profile_run(model, [device], Placement((device.name,)), repeat=n).median_s


def end_to_end_seconds(
    model: Model, plans: Mapping[str, tuple[Sequence[DeviceSpec], Plan]],
    options: BuildOptions | None = None, repeat: int = 15, rounds: int = 3,
) -> dict[str, float]:  # fmt: skip
    """Each of ``plans`` (name: its devices in the plan's order, the plan) compiled and run on
    its devices in ``rounds`` interleaved rounds, ``repeat`` runs each in all (builds too many
    to hold at once are saved and timed apart): its median seconds by name. How a strategy
    confirms its priced plan against its rivals (Lee et al.'s best baseline, EOP's devices
    alone): a slow spell of the machine falls on all of them."""
    from tvm_hetero.build.compiled import compile_model
    from tvm_hetero.build.held import HeldBuilds
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    with HeldBuilds(model, len(plans)) as held:
        built = [
            held.add(name, compile_model(model, devices, plan, options))
            for name, (devices, plan) in plans.items()
        ]
        samples = interleaved_run_seconds(built, [repeat] * len(plans), rounds=rounds)
    return {name: statistics.median(s) for name, s in zip(plans, samples, strict=True)}


def placement_summary(model: Model, plan: Plan) -> list[dict[str, Any]]:
    """Per device: operators, FLOPs share and bytes copied in, for a placement of ``model``."""
    from tvm_hetero.ir.opgraph import OpGraph
    from tvm_hetero.plan.placement import summarize

    graph = OpGraph.from_module(model.mod)
    ops = [(n.node_id, n.flops) for n in graph.nodes]
    edges = [(u, v, d["bytes"]) for u, v, d in graph.graph.edges(data=True)]
    return summarize(ops, edges, plan)


def placement_table(model: Model, plan: Plan) -> Any:
    """Per device of ``plan``: operators, GFLOPs, FLOPs share, copies and MiB copied in."""
    from tvm_hetero.viz.tables import table

    rows = [
        [r["device"], r["ops"], r["flops"] / 1e9, 100 * r["flops_share"], r["copies_in"],
         r["bytes_in"] / 2**20]
        for r in placement_summary(model, plan)
    ]  # fmt: skip
    cols = ["device", "ops", "GFLOPs", "FLOPs %", "copies in", "MiB in"]
    return table("Placement", cols, rows)


def add_shared_arguments(p: argparse.ArgumentParser) -> None:
    """Flags every strategy reads: the profile database, offline devices, confirmation."""
    p.add_argument(
        "--db", metavar="PATH", help="profile database every strategy reads and adds to, so "
        "nothing is timed twice (default .tvm-hetero/profiles.jsonl; EOP's fitted patterns go "
        "next to it)",
    )  # fmt: skip
    p.add_argument(
        "--offline", metavar="DIR",
        help="for devices only reached offline (a GPU box; --cluster describes it; eop, als, "
        "duet): export every workload the planner asks for to DIR, to time there (tvm-hetero "
        "bundle, then tvm-hetero measure); once DIR holds the box's results.jsonl, merge them "
        "into --db and plan for the box (duet asks in rounds: run it again after each)",
    )  # fmt: skip
    p.add_argument(
        "--confirm", action=argparse.BooleanOptionalAction, default=True,
        help="time the plan and its closest rivals end to end and keep the fastest (als: the "
        "best baseline; eop: each device alone; flexpie: --confirm-plans of them and the home "
        "device alone)",
    )  # fmt: skip


def profiler_of(settings: argparse.Namespace, progress: Progress) -> Profiler:
    """The profiler a strategy measures with: records in ``settings.db``; with
    ``settings.offline`` its runner serves the box's results from that folder (merged into the
    database first) and exports what they lack."""
    from tvm_hetero.profiling.profiler import profiler_for

    offline = getattr(settings, "offline", None)
    if not offline:
        return profiler_for(settings.db, settings.options)
    from tvm_hetero.profiling.offline import OfflineRunner
    from tvm_hetero.runtime.measure import PROFILE_CONFIG

    runner = OfflineRunner(offline, PROFILE_CONFIG)
    profiler = profiler_for(settings.db, settings.options, runner)
    if runner.measured:
        added = runner.merge_into(profiler.db)
        names = ", ".join(f"{n}: {fp.name}" for n, fp in sorted(runner.fingerprints.items()))
        progress.say(f"merged {added} new record(s) from {offline} ({names})")
    return profiler


class WorkloadsExported(Exception):
    """An offline plan stopped after writing the workloads the box must time first.

    Attributes
    ----------
    folder : str
        Where they were written (``--offline``).
    code : int
        0 when they are all new, 1 when an earlier round exported some already (the box's
        results still lack them).
    """

    def __init__(self, message: str, folder: str, code: int) -> None:
        super().__init__(message)
        self.folder, self.code = folder, code


def stop_if_exported(settings: argparse.Namespace, profiler: Profiler) -> None:
    """After an offline planner's measuring: if it asked for workloads the box has not timed,
    write them to ``settings.offline`` and raise :class:`WorkloadsExported`."""
    runner = profiler.runner
    if not getattr(runner, "offline", False) or not runner.entries:
        return
    path = runner.save()
    again = runner.asked_again
    raise WorkloadsExported(
        f"exported {len(runner.entries)} workload(s) to {path.parent} (round {runner.round})"
        + (f"; {again} of them still unmeasured from the round before" if again else ""),
        str(path.parent),
        1 if again else 0,
    )


def measured_counts(profiler: Profiler) -> dict[str, int]:
    """What a profiler timed and what it found in its database."""
    return {"workloads timed": profiler.misses, "records reused": profiler.hits}
