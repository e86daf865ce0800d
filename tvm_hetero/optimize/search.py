"""The fastest way to run a model on the devices at hand: every strategy that applies plans
(measurements shared through one profile database), each device alone is a candidate too, and
the most promising are compiled and timed end to end in interleaved rounds; the fastest
measured is kept. ONNX Runtime on each CPU alone is timed in the same rounds when it can run
the model."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tvm_hetero.build.compiled import CompiledModel, compile_model, in_plan_order
from tvm_hetero.build.held import HeldBuilds
from tvm_hetero.devices.discover import merged_cpu
from tvm_hetero.devices.spec import DeviceKind, DeviceSpec
from tvm_hetero.errors import BuildError, RunError
from tvm_hetero.frontends.model import Model
from tvm_hetero.optimize.peer import onnxruntime_missing
from tvm_hetero.plan.placement import Placement
from tvm_hetero.plan.registry import Plan
from tvm_hetero.strategies.base import (
    OBJECTIVES,
    OutOfTime,
    PlanResult,
    Progress,
    SearchCosts,
    WorkloadsExported,
)
from tvm_hetero.strategies.registry import strategies as registered

FAILURES = (ValueError, BuildError, RunError, NotImplementedError)
"""What a strategy that cannot handle a model raises: it drops out, the search goes on."""
PLANNING_SHARE = 0.5
"""The part of the budget left after each device alone was compiled and run once that the
strategies plan in (less where compiling and timing the candidates would not fit in the
rest: :meth:`_Search.floor`); compiling and timing them take the rest and what planning left.
Before, the budget bounded planning alone and the candidates were compiled and timed after
it: searches on the emulated clusters took two to four times their budget."""


@dataclass(frozen=True)
class Entry:
    """One way to run the model, as ``optimize`` weighed it.

    Attributes
    ----------
    name : str
        ``duet``, ``cpu@0 alone``, ``ORT on cpu@0``.
    kind : str
        ``strategy``, ``single`` (one device, every operator) or ``peer`` (ONNX Runtime,
        ``ORT on cpu@0``).
    devices : tuple[str, ...]
        The devices it runs on.
    predicted_s : float | None
        The strategy's predicted seconds (a period for a stream); None where unpriced.
    samples_s : tuple[float, ...]
        Seconds of each timed run (per request with requests in flight), empty if not timed.
    status : str
        ``kept``, ``timed``, or why it was not timed (not applicable, failed, over budget...).
    plan : Plan | None
        Its plan (None for ONNX Runtime).
    """

    name: str
    kind: str
    devices: tuple[str, ...]
    predicted_s: float | None = None
    samples_s: tuple[float, ...] = ()
    status: str = ""
    plan: Plan | None = field(default=None, repr=False)

    @property
    def p50_s(self) -> float | None:
        """Median seconds of the timed runs."""
        return statistics.median(self.samples_s) if self.samples_s else None

    @property
    def p99_s(self) -> float | None:
        """99th percentile of the timed runs."""
        return float(np.percentile(self.samples_s, 99)) if self.samples_s else None


@dataclass(frozen=True)
class OptimizeResult:
    """What ``optimize`` found.

    Attributes
    ----------
    model : str
        The model's name.
    objective : str
        ``latency`` (one request) or ``throughput`` (a stream).
    entries : tuple[Entry, ...]
        Every candidate, timed or not, strategies first.
    kept : Entry
        The fastest measured (a strategy's plan or one device alone).
    compiled : CompiledModel
        Its build, ready to save.
    plans : dict[str, PlanResult]
        Each strategy's own result, for its report and chart.
    seconds : float
        How long the search took.
    phases : dict[str, float]
        Its seconds by phase, in order: ``each device alone`` (compiled and run once; not
        offline), ``planning``, ``compiling``, ``timing`` (and ``compiling the kept one
        again`` where its build was not held).
    cut : str
        What the budget's end cut short (``"timed 8 of 20 runs each"``), empty if nothing.
    budget_s : float
        The seconds it was given (0: not recorded).
    """

    model: str
    objective: str
    entries: tuple[Entry, ...]
    kept: Entry
    compiled: CompiledModel = field(repr=False)
    plans: dict[str, PlanResult] = field(default_factory=dict, repr=False)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    cut: str = ""
    budget_s: float = 0.0

    def best(self, kind: str) -> Entry | None:
        """The fastest measured entry of ``kind``."""
        timed = [e for e in self.entries if e.kind == kind and e.samples_s]
        return min(timed, key=lambda e: e.p50_s, default=None)


class OverBudget(Exception):
    """The search's time ran out while a strategy was planning."""


class _Budgeted(Progress):
    """The search's progress, passed to each strategy: it forwards every report and stops the
    strategy (:class:`OverBudget`) at its first report past the deadline that begins work; a
    report that a phase is done (``done == total``) is let through, so that work finished
    late is kept, not thrown away (FlexPie's confirmation of ResNet-50 on the emulated ring of
    three ended a few seconds past its share and was dropped at its "confirmed"). A strategy
    that reads :meth:`time_left` winds down by itself and is stopped only a whole share late
    (DUET's correction on MT-DNN over the emulated ring of three, each run a compile and a
    remote upload, was stopped mid-run at its share and its measured plans lost)."""

    def __init__(self, inner: Progress, share: float, costs: SearchCosts | None = None) -> None:
        self.inner, self.share, self.measured = inner, share, costs
        self.deadline = time.monotonic() + share
        self.winding_down = False

    def costs(self) -> SearchCosts | None:
        return self.measured

    def step(self, what: str, done: int, total: int | None) -> None:
        finished = total is not None and done >= total
        late = time.monotonic() - self.deadline
        if late > (self.share if self.winding_down else 0.0) and not finished:
            raise OverBudget(what)
        self.inner.step(what, done, total)

    def say(self, text: str) -> None:
        self.inner.say(text)

    def time_left(self) -> float:
        self.winding_down = True
        return self.deadline - time.monotonic()


@dataclass
class _Search:
    """The state of one search: the clock, the candidates and their builds."""

    model: Model
    devices: list[DeviceSpec]
    objective: str
    settings: Mapping[str, Any]
    progress: Progress
    deadline: float  # of planning
    end: float  # of the search
    builds: HeldBuilds = field(repr=False)
    entries: list[Entry] = field(default_factory=list)
    plans: dict[str, PlanResult] = field(default_factory=dict)
    compile_s: list[float] = field(default_factory=list)  # each compile's, as it ends
    floor_s: float = 0.0  # of the budget, what compiling each device alone and a run took
    reserve_s: float = 0.0  # what compiling and timing the candidates will take, estimated
    floor_took_all: bool = False  # the floor left planning no time
    costs: SearchCosts | None = None  # what the floor measured, for the strategies
    applying: list[str] = field(default_factory=list)  # the strategies that apply, in order

    def over(self) -> bool:
        return time.monotonic() > self.deadline

    def ask(self) -> None:
        """Every registered strategy asked whether it applies: those that do are
        :attr:`applying`, the others entries with the reason."""
        offline = self.settings.get("offline")
        cluster = self.settings.get("cluster")
        for name, strategy in registered().items():
            why = None
            # a plan for one request serves a stream too (requests in flight overlap where
            # its devices are free); a pipeline for a stream is not a plan for one request
            if strategy.objective != self.objective and strategy.objective != "latency":
                why = f"plans for {strategy.objective}, not {self.objective}"
            elif offline and not strategy.offline:
                why = "cannot plan for devices reached only offline"
            why = why or strategy.applicable(self.model, self.devices, cluster)
            if why is None:
                self.applying.append(name)
            else:
                self.entries.append(Entry(name, "strategy", (), status=f"not applicable: {why}"))

    def plan_all(self) -> None:
        """Each strategy that applies (:meth:`ask`) planned within an equal share of the budget
        left (what one leaves unused passes to the next), so a slow strategy early in the
        registry cannot starve the others. For devices reached offline, the first strategy
        that exports workloads for the box ends the search's round (its results, merged next
        time, let it plan; then the next one asks)."""
        found, applying = registered(), self.applying
        for k, name in enumerate(applying):
            strategy = found[name]
            if self.over():
                self.entries.append(Entry(name, "strategy", (), status=self.not_planned()))
                continue
            share = (self.deadline - time.monotonic()) / (len(applying) - k)
            self.progress.step(f"planning with {name}", k, len(applying))
            try:
                known = vars(strategy.settings())
                given = {key: v for key, v in self.settings.items() if key in known}
                budgeted = _Budgeted(self.progress, share, self.costs)
                result = strategy.plan(
                    self.model, self.devices, strategy.settings(**given), budgeted
                )
            except OverBudget as late:
                seconds = f"{share:.1f}" if share < 10 else f"{share:.0f}"
                status = f"stopped: over its {seconds} s of the budget while {late}"
                self.entries.append(Entry(name, "strategy", (), status=status))
                continue
            except OutOfTime as short:
                self.entries.append(Entry(name, "strategy", (), status=f"stopped: {short}"))
                continue
            except WorkloadsExported as done:  # one strategy's round at a time: the box's
                raise WorkloadsExported(f"{name}: {done}", done.folder, done.code) from None
            except FAILURES as err:
                self.entries.append(Entry(name, "strategy", (), status=f"failed: {err}"))
                continue
            except Exception as err:  # a strategy's bug: the search goes on, and says so
                status = f"failed (a bug): {type(err).__name__}: {err}"
                self.entries.append(Entry(name, "strategy", (), status=status))
                continue
            plan = result.plan
            if result.compiled is not None:  # held once, in the search's builds
                self.builds.add(name, result.compiled)
                result = replace(result, compiled=None)
                self.builds.dropped()
            self.plans[name] = result
            self.entries.append(Entry(name, "strategy", tuple(plan.devices), result.predicted_s,
                                      plan=plan))  # fmt: skip

    def floor(self, top: int, runs: int, rounds: int, peers: bool) -> None:
        """Each device alone compiled and run once before any strategy plans (each is always
        compiled and timed: the floor of the search): how long a compile and a turn of
        timing take here, measured, ends planning early enough that compiling and timing the
        plans (``top``, or as many strategies as apply), each device alone and (``peers``)
        ONNX Runtime on each CPU, as long as that CPU's turn, fit in the rest of the budget,
        where planning's share would leave them too little. ViT-Large's searches on the
        emulated clusters, planning in half of a six-minute budget, took eleven to seventeen
        minutes (compiling each candidate, a 1.2 GB library sent to each worker, runs of
        seconds)."""
        from tvm_hetero.runtime.executor import WARMUP_RUNS, run_seconds

        began = time.monotonic()
        singles = [k for k, e in enumerate(self.entries) if e.kind == "single"]
        by_name = {d.name: d for d in self.pool()}
        per_round = -(-runs // rounds)
        run_s: dict[str, float] = {}
        load_s: dict[str, float] = {}
        for n, k in enumerate(self.build(singles)):
            entry = self.entries[k]
            self.progress.step(f"running {entry.name} once", n, len(singles))
            start = time.monotonic()
            (seconds,) = run_seconds(self.builds.timed(entry.name), 1, warmup=1)
            name = entry.devices[0]
            run_s[name] = seconds
            load_s[name] = max(0.0, time.monotonic() - start - 2 * seconds)  # a warm-up, a run
        self.floor_s = time.monotonic() - began
        if not run_s:
            return
        compile_s = statistics.mean(self.compile_s) if self.compile_s else 0.0
        self.costs = SearchCosts(compile_s, load_s, run_s)
        turns = {n: self.costs.turn_s([n], s, WARMUP_RUNS, per_round) for n, s in run_s.items()}
        cpus = [t for name, t in turns.items() if by_name[name].kind is DeviceKind.CPU]
        again = compile_s if self.builds.folder is not None else 0.0  # the kept one, saved
        plans = min(top, len(self.applying))
        given = [d.name for d in self.devices]  # a plan may load on every one
        plan_turn_s = self.costs.turn_s(given, statistics.mean(run_s.values()), WARMUP_RUNS,
                                        per_round)  # fmt: skip
        self.reserve_s = (
            sum(turns.values()) + (sum(cpus) if peers else 0.0)
            + plans * (compile_s + plan_turn_s) + again
        )  # fmt: skip
        now = time.monotonic()
        self.deadline = min(now + (self.end - now) * PLANNING_SHARE, self.end - self.reserve_s)
        self.floor_took_all = self.deadline <= now

    def not_planned(self) -> str:
        """Why a strategy was not planned: the budget's end, and where the floor left no
        time to plan, how long a budget would leave planning its share."""
        if not self.floor_took_all:
            return "not planned: over budget"
        needed = self.floor_s + self.reserve_s / (1 - PLANNING_SHARE)  # its share: the rest
        return (f"not planned: each device alone took {self.floor_s:.0f} s, and timing "
                f"them leaves no time to plan (try --budget {math.ceil(needed / 60)})")  # fmt: skip

    def singles(self) -> None:
        """Each device alone (and one worker on every given CPU core set, when there are
        several): always timed, so the kept one is never slower than one device."""
        named: dict[str, DeviceSpec] = {}
        for device in self.pool():  # a given device before the merged CPU of the same name
            if device.kind is not DeviceKind.SIMULATED:
                named.setdefault(device.name, device)
        for device in named.values():
            plan = Placement((device.name,), {}, "single")
            self.entries.append(Entry(f"{device.name} alone", "single", (device.name,), plan=plan))

    def pool(self) -> list[DeviceSpec]:
        """The devices any candidate may run on (the merged CPU included)."""
        return _pool(self.devices)

    def same_as_single(self) -> None:
        """A strategy whose plan runs everything on one device is that device alone."""
        for k, entry in enumerate(self.entries):
            if entry.kind == "strategy" and len(entry.devices) == 1:
                self.entries[k] = replace(
                    entry, status=f"one device: same as {entry.devices[0]} alone"
                )

    def to_time(self, top: int) -> list[int]:
        """Indices of the entries to time: every single device, and the ``top`` strategies
        with the lowest predicted time (unpriced ones last)."""
        ranked = sorted(
            (k for k, e in enumerate(self.entries) if e.kind == "strategy" and e.plan is not None
             and not e.status),
            key=lambda k: (self.entries[k].predicted_s is None, self.entries[k].predicted_s or 0),
        )  # fmt: skip
        for k in ranked[top:]:
            self.entries[k] = replace(self.entries[k], status=f"not timed: not in the top {top}")
        singles = [k for k, e in enumerate(self.entries) if e.kind == "single" and not e.status]
        return singles + ranked[:top]

    def build(self, picked: list[int]) -> list[int]:
        """Compile each picked entry (a strategy's own build reused); a plan not compiled by
        the budget's end is not timed (each device alone always is); those that fail to build
        drop out with the reason. Returns those built."""
        built = []
        for n, k in enumerate(picked):
            entry = self.entries[k]
            late = time.monotonic() > self.end and entry.name not in self.builds
            if late and entry.kind == "strategy":
                self.entries[k] = replace(entry, status="not timed: the budget ended first")
                continue
            try:
                twin = self.twin(entry, built)
                if twin is not None:
                    self.builds.twin(twin[0], entry.name, twin[1], entry.plan)
                elif entry.name not in self.builds:  # (held: compiled before planning)
                    self.progress.step(f"compiling {entry.name}", n, len(picked))
                    began = time.monotonic()
                    self.builds.add(entry.name, self.compile(entry))
                    self.compile_s.append(time.monotonic() - began)
                    self.builds.dropped()
            except FAILURES as err:
                self.entries[k] = replace(entry, status=f"failed to build: {err}")
                continue
            built.append(k)
        return built

    def twin(self, entry: Entry, built: list[int]) -> tuple[str, DeviceSpec] | None:
        """For a device alone, another device alone already built (held or saved) whose code
        its own would be (the same kind and target: ``cpu@0`` and ``cpu@1``, a cluster's like
        devices): its name and this entry's device; its build serves this device with no
        compile (:meth:`HeldBuilds.twin`). None otherwise."""
        if entry.kind != "single" or entry.name in self.builds:
            return None
        by_name = {d.name: d for d in self.pool()}
        device = by_name[entry.devices[0]]
        for k in built:
            other = self.entries[k]
            if other.kind != "single" or other.name not in self.builds:
                continue
            theirs = by_name[other.devices[0]]
            if (theirs.kind, theirs.target) == (device.kind, device.target):
                return other.name, device
        return None

    def compile(self, entry: Entry) -> CompiledModel:
        """The entry's plan compiled for its devices."""
        devices = in_plan_order(self.pool(), entry.plan)  # type: ignore[arg-type]
        return compile_model(self.model, devices, entry.plan, self.settings.get("options"))

    def kept_build(self, entry: Entry) -> CompiledModel:
        """The kept entry's build: held, or (saved to be timed apart) compiled again."""
        build = self.builds.compiled(entry.name)
        if build is not None:
            return build
        self.progress.step(f"compiling {entry.name} again, to keep", 0, None)
        return self.compile(entry)


def optimize(
    model: Model, devices: Sequence[DeviceSpec], objective: str = "latency",
    budget_s: float = 600.0, settings: Mapping[str, Any] | None = None,
    progress: Progress | None = None, onnx: str | None = None, top: int = 3, runs: int = 50,
    rounds: int = 5, microbatches: int = 8, in_memory: bool | None = None,
) -> OptimizeResult:  # fmt: skip
    """Find the fastest way to run ``model`` on ``devices``.

    Parameters
    ----------
    model, devices
        The model (static input shapes) and the devices at hand (home first).
    objective
        ``latency``: one request at a time; ``throughput``: a stream, ``microbatches`` requests
        in flight (EdgePipe plans for it; the others run with requests in flight too).
    budget_s
        Seconds the search may take. Each device alone is compiled and run once first; the
        strategies then plan in :data:`PLANNING_SHARE` of what is left, or less where
        compiling and timing the candidates, as long as that run says, would not fit in the
        rest (one still planning then is stopped at its next progress report, one not started
        is skipped); the plans made are compiled and timed beside each device alone in the
        rest: a plan not compiled by the end is not timed, and no round of timing starts that
        would end past it (the first always runs).
    settings
        Every strategy's settings by name (``db``, ``options``, ``cluster``, ``offline``, and
        each one's flags); each strategy reads the ones it takes.
    progress
        Where the search reports (a bar on the command line).
    onnx
        The model's ONNX file: ONNX Runtime on each CPU alone is timed beside the candidates
        (a cluster's by its worker, which needs ``onnxruntime`` there: a worker without it
        adds an entry saying so).
    top
        Strategies' plans timed end to end, those with the lowest predicted time.
    runs, rounds
        Timed runs per candidate, spread over that many interleaved rounds.
    in_memory
        Hold every candidate's build in this process and time them all in it; False: save
        each build and drop it, time each in a process of its own each round
        (:mod:`tvm_hetero.runtime.apart`), and compile the kept one again. None: False when
        the candidates' builds would not fit (:func:`~tvm_hetero.build.held.builds_fit`).

    Returns
    -------
    OptimizeResult
        Every candidate with its predicted and measured times, the fastest kept and its build.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"--objective {objective!r}: choose from {', '.join(OBJECTIVES)}")
    if not devices:
        raise ValueError("optimize: give at least one device")
    start = time.monotonic()
    progress = progress or Progress()
    count = len({d.name for d in _pool(devices)}) + top
    with HeldBuilds(model, count, in_memory) as builds:  # each device alone and the top plans
        search = _Search(model, list(devices), objective, dict(settings or {}), progress,
                         start + budget_s * PLANNING_SHARE, start + budget_s, builds)  # fmt: skip
        return _search(search, start, top, runs, rounds, microbatches, onnx)


def _pool(devices: Sequence[DeviceSpec]) -> list[DeviceSpec]:
    """``devices`` and, for CPU core sets, one worker on all their cores."""
    merged = merged_cpu(devices)
    return [*devices, *([merged] if merged is not None else [])]


def _search(
    search: _Search, start: float, top: int, runs: int, rounds: int, microbatches: int,
    onnx: str | None,
) -> OptimizeResult:  # fmt: skip
    """:func:`optimize`'s steps, on its search."""
    model, progress = search.model, search.progress
    phases: dict[str, float] = {}
    mark = start

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name], mark = now - mark, now

    search.ask()
    search.singles()
    if not search.settings.get("offline"):
        search.floor(top, runs, rounds, bool(onnx) and not onnxruntime_missing(onnx))
        phase("each device alone")
    search.plan_all()
    order = {name: k for k, name in enumerate(registered())}
    search.entries.sort(key=lambda e: (e.kind != "strategy", order.get(e.name, 0)))
    search.same_as_single()
    picked = search.to_time(top)
    if search.settings.get("offline"):
        return _offline(search, picked, runs, start)
    phase("planning")
    built = search.build(picked)
    phase("compiling")
    peers = _peers(onnx, search, model)
    timed = [search.entries[k] for k in built]
    progress.step(f"timing {len(timed) + len(peers)} candidates in {rounds} rounds", 0, None)
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    stream = microbatches if search.objective == "throughput" else 1
    try:
        samples = interleaved_run_seconds(
            [search.builds.timed(e.name) for e in timed], [runs] * len(timed), rounds,
            microbatches=stream, peers=[p for _, p in peers], deadline=search.end,
        )  # fmt: skip
    finally:
        for _, peer in peers:
            peer.close()
    for k, got in zip(built, samples, strict=False):
        search.entries[k] = replace(search.entries[k], samples_s=got, status="timed")
    for (device, _), got in zip(peers, samples[len(built) :], strict=True):
        name = f"ORT on {device.name}"
        search.entries.append(Entry(name, "peer", (device.name,), samples_s=got, status="timed"))
    ours = [k for k in built if search.entries[k].samples_s]
    best = min(ours, key=lambda k: search.entries[k].p50_s)
    search.entries[best] = replace(search.entries[best], status="kept")
    kept = search.entries[best]
    phase("timing")
    held = search.builds.compiled(kept.name) is not None
    build = search.kept_build(kept)
    if not held:
        phase("compiling the kept one again")
    fewest = min((len(s) for s in samples[: len(built)]), default=runs)
    cut = f"timed {fewest} of {runs} runs each" if fewest < runs else ""
    return OptimizeResult(
        model.name, search.objective, tuple(search.entries), kept, build, search.plans,
        time.monotonic() - start, phases, cut, search.end - start,
    )  # fmt: skip


def _offline(search: _Search, picked: list[int], runs: int, start: float) -> OptimizeResult:
    """The picked candidates timed on the box: each exported, compiled, for the box to run
    (:meth:`Profiler.profile_run`) and, once its results are merged, read back. Raises
    :class:`WorkloadsExported` while some are not timed yet; the next round keeps the fastest."""
    import argparse

    from tvm_hetero.strategies.base import profiler_of, stop_if_exported

    settings = argparse.Namespace(**{"db": None, "options": None, **search.settings})
    profiler = profiler_of(settings, search.progress)
    records = {}
    for n, k in enumerate(picked):
        entry = search.entries[k]
        search.progress.step(f"timing {entry.name} on the box", n, len(picked))
        devices = in_plan_order(search.pool(), entry.plan)  # type: ignore[arg-type]
        records[k] = profiler.profile_run(search.model, devices, entry.plan, repeat=runs)
    stop_if_exported(settings, profiler)
    for k, record in records.items():
        search.entries[k] = replace(search.entries[k], samples_s=record.samples_s, status="timed")
    best = min(records, key=lambda k: search.entries[k].p50_s)
    search.entries[best] = replace(search.entries[best], status="kept")
    kept = search.entries[best]
    return OptimizeResult(
        search.model.name, search.objective, tuple(search.entries), kept, search.compile(kept),
        search.plans, time.monotonic() - start,
    )  # fmt: skip


def _peers(onnx: str | None, search: _Search, model: Model) -> list[tuple[DeviceSpec, Any]]:
    """ONNX Runtime on each CPU that runs the model alone, when it can run the model here: in
    this process for this machine's CPUs, by the worker for a cluster's (a worker that cannot,
    without ``onnxruntime`` say, adds an entry saying so instead)."""
    from tvm_hetero.errors import RunError
    from tvm_hetero.optimize.peer import OnnxRuntimePeer, RemoteOnnxRuntimePeer

    if onnx is None or onnxruntime_missing(onnx) or search.settings.get("offline"):
        return []
    inputs = list(model.random_inputs().values())
    by_name = {d.name: d for d in search.pool()}
    cpus = [
        by_name[e.devices[0]] for e in search.entries
        if e.kind == "single" and by_name[e.devices[0]].kind is DeviceKind.CPU
    ]  # fmt: skip
    peers: list[tuple[DeviceSpec, Any]] = []
    for device in cpus:
        if device.host is None:
            peers.append((device, OnnxRuntimePeer(onnx, device, inputs)))
            continue
        peer = RemoteOnnxRuntimePeer(onnx, device, inputs)
        try:
            peer.open()  # what a worker lacks is said now, not in the middle of the rounds
        except RunError as err:
            peer.close()
            entry = Entry(f"ORT on {device.name}", "peer", (device.name,), status=f"failed: {err}")
            search.entries.append(entry)
            continue
        peers.append((device, peer))
    return peers


def settings_names() -> set[str]:
    """Every setting some strategy takes."""
    names: set[str] = set()
    for strategy in registered().values():
        names |= set(vars(strategy.settings()))
    return names
