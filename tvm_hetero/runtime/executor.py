"""Run a deployment: each unit on its device's worker as soon as its inputs exist.

No thread ever waits for work by spinning: a worker blocks on its queue, the caller on an event.
When a step ends, the thread that ran it counts down its successors and hands each ready one to
its worker (a unit, a copy that moves bytes) or does it on the spot (a tuple item, a copy between
CPU workers, which share memory). One ready step it may also go on with itself instead of handing
it over (``on_spot``): a unit of its own worker whose queue is empty, a local copy, or a unit of
an idle GPU (a GPU unit launches kernels from any thread). A chain CPU -> GPU -> CPU then runs on
the CPU worker's thread with no hand-over (a wake-up there and back is 31 us on the H200 box; a
crossing measured 47-73 us with them, 39-41 without, `benchmarks/gpu/README.md`). Every unit
and copy is timed; :attr:`Executor.timeline` is the measured timeline of the last run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tvm
import tvm_ffi

from tvm_hetero.devices.spec import DeviceKind
from tvm_hetero.errors import RunError
from tvm_hetero.runtime.apart import STEP_TIMEOUT_S, time_saved
from tvm_hetero.runtime.deployment import Deployment, Step
from tvm_hetero.runtime.memory import array_of, tensor_on
from tvm_hetero.runtime.native_programs import NativeRunner, NotNative
from tvm_hetero.runtime.program_runner import ProgramRunner
from tvm_hetero.runtime.programs import NotProgrammable, Programs, worker_programs
from tvm_hetero.runtime.runs import Event, Run, Timeline, bare, release, reported_events
from tvm_hetero.runtime.stats import LatencyStats, warm_up
from tvm_hetero.runtime.worker import LocalWorker, Worker


class Executor:
    """Runs a deployment on one worker per device, concurrently where the graph allows.

    Parameters
    ----------
    deployment : Deployment
        With its libraries loaded (or built).
    workers : mapping of device index to Worker, optional
        Workers to use (remote ones, say); local worker threads by default. A deployment whose
        units all sit on one unpinned device runs them in the calling thread.
    timeout_s : float
        A unit or copy that has not finished after this long (a worker that died or stopped
        answering) fails the run with a :class:`RunError` naming the worker and the step,
        instead of hanging.
    on_spot : bool
        Let the thread that ends a step go on with one ready successor itself where no other
        thread is needed (module docstring); ``False``: every unit and moving copy is handed to
        its worker's thread (to measure what the hand-over costs).
    alone : bool
        Run every step by itself, in dependency order, each on its worker's thread with no
        other step running anywhere: each unit's time alone on its device, what an estimator
        of one tile prices, to set beside the same units run together (a diagnosis: no
        overlap, so the run takes the sum of its steps).
    programs : bool
        Run local CPU workers and remote workers by their programs
        (:mod:`tvm_hetero.runtime.programs`: each worker is started once a run and runs its
        steps in order, waiting only for values another worker hands over); ``False``: by
        dataflow, every step handed to its worker as its inputs become ready (the runtime
        before, kept to measure against, and still the one for a local GPU).
    native : bool
        Run programs natively (no Python between two units): those of a deployment whose
        workers are all local CPU threads (:mod:`tvm_hetero.runtime.native_programs`), and each
        remote CPU worker's (:mod:`tvm_hetero.runtime.native_remote`); ``False``, or where it
        does not apply, by Python.
    """

    def __init__(
        self,
        deployment: Deployment,
        workers: Mapping[int, Worker] | None = None,
        timeout_s: float = 600.0,
        on_spot: bool = True,
        alone: bool = False,
        programs: bool = True,
        native: bool = True,
    ) -> None:
        self.deployment, self.timeout_s, self.on_spot = deployment, timeout_s, on_spot
        self.alone, self.native = alone, native
        used = sorted({s.device for s in deployment.units})
        sole = deployment.devices[used[0]] if len(used) == 1 else None
        inline = sole is not None and sole.cores is None and sole.host is None
        self.workers: dict[int, Worker] = dict(workers or {})
        try:
            for k in used:
                if k not in self.workers:
                    self.workers[k] = _start_worker(deployment, k, inline, timeout_s)
        except BaseException:
            self.close()
            raise
        self._home = _home_device(deployment)
        self.index = {s.name: i for i, s in enumerate(deployment.steps)}
        self._succ: list[list[int]] = [[] for _ in deployment.steps]
        self._deps: list[int] = []
        for i, step in enumerate(deployment.steps):
            producers = {self.index[v] for v in step.inputs if v in self.index}
            self._deps.append(len(producers))
            for p in producers:
                self._succ[p].append(i)
        self._roots = [i for i, d in enumerate(self._deps) if d == 0]
        # everything on one worker in the calling thread: run the steps in order, no countdowns
        self._serial = inline and workers is None
        self._order = _topological_order(self._deps, self._succ)
        # tuple items and copies between CPU workers (shared memory) run on the spot; so do a
        # copy between two remote workers (pushed by the producer or pulled by the consumer) and a
        # remote result's copy that only the outputs read (the client downloads it from there)
        self._here = [
            s.kind == "item" or (s.kind == "copy" and not deployment.moves(s))
            for s in deployment.steps
        ]
        self._pull = [self._pulled(s) for s in deployment.steps]
        self._pushes = self._pushed_copies()
        self._passed = [
            s.kind == "copy" and s.name in deployment.outputs and not self._succ[i]
            and self._remote(s.inputs[0])
            for i, s in enumerate(deployment.steps)
        ]  # fmt: skip
        # what the calling thread performs itself, never a worker's thread
        self._threadless = [
            a or b or c for a, b, c in zip(self._here, self._pull, self._passed, strict=True)
        ]
        # a unit run on a remote worker: its value says how long it waited there for inputs
        self._remote_made = [
            s.kind == "unit" and deployment.devices[s.device].host is not None
            for s in deployment.steps
        ]
        self._layouts: dict[int, tuple] = {}  # copy step -> its shape, as FFI objects too
        self._kept = refilled_copies(deployment)
        self._buffers: dict[tuple[int, int], tvm.runtime.Tensor] = {}
        self._timeline: Timeline | Callable[[], Timeline] | None = None
        self.finished_s: tuple[float, ...] = ()
        self.programs: Programs | None = None
        self._runner: ProgramRunner | NativeRunner | None = None
        if programs and not self._serial and self._programmable():
            remote = {k for k, w in self.workers.items() if not isinstance(w, LocalWorker)}
            try:
                self.programs = worker_programs(deployment, self.workers, remote)
                self._runner = self._native() if native else None
                self._runner = self._runner or ProgramRunner(self)
            except NotProgrammable:
                self.programs = None
            except BaseException:
                self.close()
                raise

    def _programmable(self) -> bool:
        """Whether every worker runs programs: a CPU worker thread of this process, or a
        remote worker (a local GPU's units still go to whichever thread made them ready, which
        saved a wake-up there and back, 31 us on the H200 box, not yet measured against
        programs)."""
        return all(
            w.spec.kind is DeviceKind.CPU if isinstance(w, LocalWorker)
            else hasattr(w, "run_program")
            for w in self.workers.values()
        )  # fmt: skip

    def _remote(self, value: str) -> bool:
        """Whether ``value`` is made on a remote worker (a deployment input is not; a tuple's
        item is made where its tuple is: taken for a local value, a copy of a remote unit's
        item was queued on the consumer's client thread, behind the unit running there)."""
        i = self.index.get(value)
        while i is not None and self.deployment.steps[i].kind == "item":
            i = self.index.get(self.deployment.steps[i].inputs[0])
        device = None if i is None else self.deployment.steps[i].device
        return device is not None and self.deployment.devices[device].host is not None

    def _pulled(self, step: Any) -> bool:
        """A copy from one remote worker to another: the receiver pulls it."""
        dep = self.deployment
        return (
            step.kind == "copy" and dep.devices[step.device].host is not None
            and self._remote(step.inputs[0]) and dep.moves(step)
        )  # fmt: skip

    def _pushed_copies(self) -> dict[int, list[tuple[int, int]]]:
        """Per unit, the copies between remote workers of its result or of its tuple's items,
        as (copy step, item index or ``-1``): its worker pushes them when the unit ends
        (:meth:`RemoteWorker.call`) instead of each consumer pulling once the client has
        heard that it ended."""
        steps, pushes = self.deployment.steps, {}
        for j, step in enumerate(steps):
            if not self._pull[j]:
                continue
            p = self.index[step.inputs[0]]
            index = -1
            if steps[p].kind == "item" and steps[p].inputs[0] in self.index:
                p, index = self.index[steps[p].inputs[0]], steps[p].index
            if steps[p].kind == "unit":
                pushes.setdefault(p, []).append((j, index))
        return pushes

    @property
    def timeline(self) -> Timeline | None:
        """The last request's timeline (made when first read, where a runner keeps it so)."""
        if callable(self._timeline):
            self._timeline = self._timeline()
        return self._timeline

    @timeline.setter
    def timeline(self, value: Timeline | Callable[[], Timeline] | None) -> None:
        self._timeline = value

    # -- running ---------------------------------------------------------------------------

    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run once on numpy inputs (in the deployment's input order, or by name)."""
        return self.outputs_of(self.run_tensors(self.place_inputs(inputs)))

    def outputs_of(self, values: Mapping[str, Any]) -> list[np.ndarray]:
        """The outputs of a run (from :meth:`run_tensors` or :meth:`run_many`), as numpy."""
        return _to_numpy([values[v] for v in self._outputs])

    @property
    def _outputs(self) -> tuple[str, ...]:
        return self.deployment.outputs

    def place_inputs(
        self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
    ) -> list[tvm.runtime.Tensor]:
        """The inputs as tensors on the home device."""
        specs = self.deployment.inputs
        names = [i.name for i in specs]
        if isinstance(inputs, Mapping):
            missing = [n for n in names if n not in inputs]
            extra = sorted(set(inputs) - set(names))
            if missing or extra:
                said = ", ".join(
                    f"{what} {items}" for what, items in (("missing", missing), ("unknown", extra))
                    if items
                )  # fmt: skip
                raise ValueError(f"input(s) {said}; the model takes {names}")
            inputs = [inputs[n] for n in names]
        if len(inputs) != len(names):
            raise ValueError(f"the model takes {len(names)} inputs {names}, got {len(inputs)}")
        return [tensor_on(spec.check(a), self._home) for spec, a in zip(specs, inputs, strict=True)]

    def run_tensors(self, tensors: Sequence[tvm.runtime.Tensor]) -> dict[str, Any]:
        """Run once on tensors already on the home device; return every value by name."""
        return self.run_many([tensors])[0]

    def run_many(self, batches: Sequence[Sequence[tvm.runtime.Tensor]]) -> list[dict[str, Any]]:
        """Run on several inputs at once, each on tensors already on the home device: a
        pipelined run when the units form stages (each worker takes the oldest microbatch it
        has input for, so stage ``k`` works on microbatch ``i`` while stage ``k + 1`` works on
        ``i - 1``). Returns every value of each run by name; :attr:`timeline` holds every
        event (with its microbatch) and :attr:`finished_s` when each run ended. A copy onto
        a GPU that makes no output fills the same tensor every run (:func:`refilled_copies`):
        such an intermediate value is overwritten by the next run."""
        if self._serial and len(batches) == 1:
            return [self._run_serial(batches[0])]
        if self.alone:
            return [self._run_alone(tensors) for tensors in batches]
        if self._runner is not None:
            return self._runner.run(batches)
        for worker in self.workers.values():
            if hasattr(worker, "begin_run"):
                worker.begin_run()
        start = time.perf_counter()
        runs = [Run(len(self.deployment.steps), self._deps, k, start) for k in range(len(batches))]
        for run, tensors in zip(runs, batches, strict=True):
            for info, tensor in zip(self.deployment.inputs, tensors, strict=True):
                run.values[info.name] = tensor
            if not self.deployment.steps:
                run.done.set()
        for run in runs:  # the caller goes on with a step itself only in a run of one input
            self._execute(run, self._start(run, self._roots, None, len(runs) == 1), None)
        return self.finish(runs, start)

    def finish(self, runs: list[Run], start: float) -> list[dict[str, Any]]:
        """Wait for ``runs`` (started at ``start``), keep their timeline, return their values."""
        for run in runs:
            self._wait(run)
            if run.error is not None:
                raise run.error
        events = tuple(e for run in runs for e in run.events)
        reported = [r for run in runs for r in run.reported]
        total = time.perf_counter() - start
        if reported:  # made when read
            steps = self.deployment.steps
            self.timeline = lambda: Timeline((*events, *reported_events(reported, steps)), total)
        else:
            self.timeline = Timeline(events, total)
        self.finished_s = tuple(run.end - start for run in runs)
        return [run.values for run in runs]

    def _run_serial(self, tensors: Sequence[tvm.runtime.Tensor]) -> dict[str, Any]:
        """One run with every step in the calling thread, in dependency order (what the
        countdowns would do, without their bookkeeping: with events as named tuples, what the
        executor adds to a one-unit run went from 22 to 10 us, `benchmarks/runtime/bench.py`)."""
        return self._in_order(Run(0, self._deps, concurrent=False), tensors, self.perform)

    def _run_alone(self, tensors: Sequence[tvm.runtime.Tensor]) -> dict[str, Any]:
        """One run, its steps one at a time in dependency order (:attr:`alone`)."""
        run = Run(len(self.deployment.steps), self._deps)
        return self._in_order(run, tensors, self._perform_alone)

    def _in_order(self, run: Run, tensors, perform) -> dict[str, Any]:
        """``run`` on ``tensors``, its steps one after another in dependency order, each by
        ``perform(run, i)``; every value by name."""
        run.values.update(zip((i.name for i in self.deployment.inputs), tensors, strict=True))
        for i in self._order:
            perform(run, i)
            if run.error is not None:
                raise run.error
        run.end = time.perf_counter()
        self.timeline = Timeline(tuple(run.events), run.end - run.start)
        self.finished_s = (run.end - run.start,)
        return run.values

    def _perform_alone(self, run: Run, i: int) -> None:
        """:meth:`perform` step ``i``, a worker's step on that worker's thread, waited for
        (within the timeout) before the caller goes on."""
        step = self.deployment.steps[i]
        if self._threadless[i]:
            self.perform(run, i)
            return
        finished = threading.Event()
        self.workers[step.device].submit(
            lambda: (self.perform(run, i), finished.set()), run.index
        )  # fmt: skip
        if not finished.wait(self.timeout_s):
            raise self.overdue(step)

    def _wait(self, run: Run) -> None:
        """Until the run ends, or a step has been running for longer than the timeout (the
        run then fails, and its workers' programs stop waiting for each other)."""
        while not run.done.wait(min(1.0, self.timeout_s)):
            now = time.perf_counter()
            # one C call under the GIL: a consistent copy while workers add and remove steps
            started = list(run.running.items())
            stuck = [(i, t) for i, t in started if now - t > self.timeout_s]
            if stuck:
                i = stuck[0][0]  # a remote worker's program is -1 - its device
                run.error = self.overdue(self.deployment.steps[i] if i >= 0 else -1 - i)
                release(run)
                raise run.error

    def overdue(self, step: Step | int) -> RunError:
        """The error of ``step`` still running on its worker after the timeout (an ``int``:
        the program of that remote device)."""
        worker = self.workers[step if isinstance(step, int) else step.device]
        where = getattr(worker, "where", worker.name)
        doing = "its program" if isinstance(step, int) else f"{step.kind} {step.name!r}"
        return RunError(
            f"run: worker {where} did not finish {doing} within "
            f"{self.timeout_s:g} s (dead or not answering; a longer wait: --timeout)",
            worker.name,
        )

    def _start(self, run: Run, ready: list[int], on: int | None, spot: bool) -> list[int]:
        """Queue each ``ready`` step on its worker but those this thread runs itself, which it
        returns: a tuple item, a copy that moves nothing, a pull, and the step it may go on
        with (:meth:`_spot`, first: run last). ``on``: the device whose worker's thread this
        is (None: the caller's)."""
        mine = self._spot(ready, on) if spot and self.on_spot else None
        local = [] if mine is None else [mine]
        for j in ready:
            if self._threadless[j]:
                local.append(j)
            elif j != mine:
                device = self.deployment.steps[j].device
                self.workers[device].submit(
                    lambda j=j, device=device: self._execute(run, [j], device), run.index
                )
        return local

    def _spot(self, ready: list[int], on: int | None) -> int | None:
        """Which of ``ready`` this thread (the worker of device ``on``, or the caller's: None)
        runs next itself: a local unit of its own worker with nothing queued there, or, while
        it has nothing queued, a copy that moves bytes onto a local device (a call that needs
        no thread pool) or a unit of an idle GPU (:attr:`LocalWorker.anywhere`)."""
        mine = self.workers.get(on) if on is not None else None
        if mine is not None and getattr(mine, "pending", lambda: 1)() > 0:
            return None
        for j in ready:
            if self._threadless[j]:
                continue
            step = self.deployment.steps[j]
            worker = self.workers[step.device]
            if not hasattr(worker, "idle"):  # a remote worker: its own client thread
                continue
            if step.device == on or step.kind == "copy":
                return j
            if getattr(worker, "anywhere", False) and worker.idle():
                return j
        return None

    def _execute(self, run: Run, todo: list[int], on: int | None) -> None:
        """Run the steps ``todo`` and those they leave to this thread (a loop, not recursion:
        a chain of units on one worker is as long as the model)."""
        while todo and run.error is None:
            i = todo.pop()
            self.perform(run, i)
            if run.error is None:
                todo.extend(self._complete(run, i, on))

    def perform(self, run: Run, i: int) -> None:
        """Step ``i`` of ``run``: its value and event, or ``run.error`` (and ``run.done``)."""
        step = self.deployment.steps[i]
        try:
            args = [run.values[v] for v in step.inputs]
            if step.kind == "item":
                run.values[step.name] = args[0][step.index]
            elif self._here[i] or self._passed[i]:
                run.values[step.name] = args[0]
            elif self._pull[i]:
                worker = self.workers[step.device]
                issued = time.perf_counter() - run.start
                pushed = run.pushed.pop(i, None)
                run.values[step.name] = pushed if pushed is not None else worker.move(args[0])
                run.events.append(Event(step.name, worker.name, "copy", issued, issued, run.index))
            else:
                worker = self.workers[step.device]
                start = time.perf_counter()
                run.running[i] = start  # (a dict's item set and pop hold the GIL: no lock)
                if step.kind == "unit" and i in self._pushes:
                    pushed = {j: self.workers[self.deployment.steps[j].device].expect()
                              for j, _ in self._pushes[i]}  # fmt: skip
                    value = worker.call(
                        step.function, args, [(x, pushed[j]) for j, x in self._pushes[i]]
                    )
                    run.pushed.update(pushed)
                elif step.kind == "unit":
                    value = worker.call(step.function, args)
                elif isinstance(args[0], tvm.runtime.Tensor) and hasattr(worker, "idle"):
                    value = self._copy(run, i, args[0], worker.device)
                else:
                    value = worker.move(args[0])
                end = time.perf_counter()
                run.values[step.name] = value
                run.events.append(
                    Event(
                        step.name, worker.name, step.kind, start - run.start, end - run.start,
                        run.index, getattr(value, "waited_s", 0.0) if self._remote_made[i] else 0.0,
                    )
                )  # fmt: skip
        except BaseException as err:
            where, device = f"{step.kind} {step.name!r}", None
            if step.device is not None:
                device = self.deployment.devices[step.device].name
                where += f" on {device}"
            device = getattr(err, "device", None) or device
            run.error = bare(RunError(f"run: {where} failed: {err}", device))
            run.done.set()

    def _copy(
        self, run: Run, i: int, value: tvm.runtime.Tensor, device: tvm.runtime.Device
    ) -> tvm.runtime.Tensor:  # fmt: skip
        """``value`` copied onto ``device`` by copy step ``i``. Onto a GPU that makes no output
        (:attr:`_kept`), into the tensor the step filled in the last run of this microbatch:
        a new one costs ``cudaMalloc`` and ``cudaFree``, 26 us of a 4 KiB copy's 31 on the
        H200 box (``benchmarks/gpu/crossing_parts.py``). Else into a new tensor made from the
        step's shape and dtype as FFI objects, kept from its last run (``Tensor.copyto(device)``
        converts both every call: 14 us of a 4 KiB copy's 16 on this host, 5.5 this way)."""
        shape = value.shape
        if self._kept[i]:
            kept = self._buffers.get((i, run.index))
            if kept is None or kept.shape != shape:
                kept = self._buffers[(i, run.index)] = tvm.runtime.empty(shape, value.dtype, device)
            return value.copyto(kept)
        known = self._layouts.get(i)
        if known is None or known[0] != shape:  # the first run, or a symbolic shape changed
            known = self._layouts[i] = (shape, tvm_ffi.Shape(shape), tvm_ffi.dtype(value.dtype))
        return value.copyto(tvm.runtime.empty(known[1], known[2], device))

    def _complete(self, run: Run, i: int, on: int | None) -> list[int]:
        ready = []
        run.running.pop(i, None)
        with run.lock:
            run.remaining[i] = -1
            run.pending -= 1
            finished = run.pending == 0
            for j in self._succ[i]:
                run.remaining[j] -= 1
                if run.remaining[j] == 0:
                    ready.append(j)
        if finished:
            run.end = time.perf_counter()
            run.done.set()
        return self._start(run, ready, on, spot=True)

    # -- timing ----------------------------------------------------------------------------

    def time(
        self,
        inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray],
        repeat: int = 100,
        warmup: int = 3,
        microbatches: int = 1,
    ) -> LatencyStats:
        """Wall-clock latency of ``repeat`` runs after ``warmup`` (inputs placed once, or given
        as tensors on the home device). With ``microbatches`` above 1 each sample is one
        pipelined run of that many inputs in flight (:meth:`run_many`) divided by their count:
        the time per request of a stream. A run ends when the caller has its outputs: one
        still held on a remote worker (too large to come back with its answer) is downloaded
        within the run, as :meth:`run` does (left there, a remote run was timed short of it)."""
        if repeat < 1 or warmup < 0 or microbatches < 1:
            raise ValueError(f"repeat and microbatches must be >= 1 and warmup >= 0, got "
                             f"{repeat}, {microbatches}, {warmup}")  # fmt: skip
        placed = isinstance(inputs, Sequence) and all(
            isinstance(a, tvm.runtime.Tensor) for a in inputs
        )
        tensors = list(inputs) if placed else self.place_inputs(inputs)
        batches = [tensors] * microbatches

        def run() -> None:
            for values in self.run_many(batches):
                _to_numpy([v for v in map(values.get, self._outputs) if hasattr(v, "download")])

        warm_up(run, warmup)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            run()
            samples.append((time.perf_counter() - start) * 1e3 / microbatches)
        return LatencyStats(tuple(samples))

    def _native(self) -> NativeRunner | None:
        """The native runner of the programs, or None where it does not apply."""
        try:
            return NativeRunner(self)
        except NotNative:
            return None

    def close(self) -> None:
        """Stop the workers this executor started."""
        runner = getattr(self, "_runner", None)  # (closed by a constructor that failed)
        if isinstance(runner, NativeRunner):
            runner.close()
        for worker in self.workers.values():
            worker.close()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def refilled_copies(deployment: Deployment) -> list[bool]:
    """Per step, whether it is a copy whose tensor each run fills again (per microbatch): a copy
    onto a GPU, not the home device, that makes none of the outputs. A value the run returns,
    or a view of one, is then never such a tensor; an intermediate value that
    :meth:`Executor.run_many` returns may be refilled by the next run."""
    made_outputs = [deployment.producer(v) for v in deployment.outputs]
    return [
        s.kind == "copy" and s.device != 0 and deployment.moves(s)
        and deployment.devices[s.device].kind is DeviceKind.CUDA
        and deployment.devices[s.device] not in made_outputs
        for s in deployment.steps
    ]  # fmt: skip


def _topological_order(deps: Sequence[int], succ: Sequence[Sequence[int]]) -> list[int]:
    """Step indices, each after all its producers."""
    remaining, order = list(deps), [i for i, d in enumerate(deps) if d == 0]
    for i in order:  # grows as steps become ready
        for j in succ[i]:
            remaining[j] -= 1
            if remaining[j] == 0:
                order.append(j)
    return order


WARMUP_RUNS = 5
"""Untimed runs of a deployment before its first timed one (fewer where they take over a
second: :func:`~tvm_hetero.runtime.stats.warm_up`)."""


def run_seconds(
    deployment: Deployment | Path, repeat: int, warmup: int = WARMUP_RUNS
) -> tuple[float, ...]:
    """One sample per run of ``deployment`` end to end on the concurrent runtime, its inputs
    drawn with seed 0 from its input specs (what ``Model.random_inputs`` draws); a saved one
    (its ``.tar``) in a process of its own (:func:`interleaved_run_seconds`)."""
    return interleaved_run_seconds([deployment], [repeat], rounds=1, warmup=warmup)[0]


SETTLE_RUNS = 2
"""Untimed runs of a deployment each time its turn comes again in interleaved rounds: the
workers of the one timed before may still spin for a while (TVM's thread pools wait busy), and
on two cores the first runs after a switch took up to 20 times the median."""


def _opened(deployment: Deployment, feeds: Mapping | None = None) -> tuple[Executor, list]:
    """An executor of ``deployment`` (the caller closes it) and ``feeds`` (random inputs where
    none are given) placed on it."""
    executor = Executor(deployment, timeout_s=STEP_TIMEOUT_S)
    try:
        rng = np.random.default_rng(0)
        return executor, executor.place_inputs(
            feeds or {spec.name: spec.random(rng) for spec in deployment.inputs}
        )
    except BaseException:
        executor.close()
        raise


def interleaved_run_seconds(
    deployments: Sequence[Deployment | Path], repeats: Sequence[int], rounds: int = 5,
    warmup: int = WARMUP_RUNS, microbatches: int = 1,
    peers: Sequence[Callable[[int, int], list[float]]] = (),
    deadline: float | None = None, least: int | None = None, feeds: Mapping | None = None,
) -> list[tuple[float, ...]]:  # fmt: skip
    """:func:`run_seconds` of several deployments at once, in ``rounds`` rounds that run each
    in turn (about ``repeat / rounds`` runs a round): a slow spell of the machine falls on all
    of them, not on whichever was being timed (on a GPU box, one trial's 30 runs measured 3.33
    ms and its mirror image's 2.04). Each deployment is loaded once, warmed up ``warmup`` runs,
    and :data:`SETTLE_RUNS` runs each later round, except that a remote worker serves one session
    at a time: a deployment is let go when another needs one of its workers, and loaded again
    (``warmup`` runs) in its next turn. ``microbatches``: each sample is the time per request
    of that many in flight (:meth:`Executor.time`). ``peers`` are other runtimes timed in the
    same rounds (``peer(runs, warmup)`` returns each run's seconds: ONNX Runtime's session),
    ``max(repeats)`` runs each; their samples follow the deployments'. A peer with a
    ``worker_id`` runs on that remote worker: it is let go (``peer.release()``) when a
    deployment needs the worker, and a deployment holding it is let go before the peer's
    turn. A deployment given as the path of its ``.tar`` is timed in a process of its own
    each round, after ``warmup`` runs the first round and :data:`SETTLE_RUNS` later
    (:func:`~tvm_hetero.runtime.apart.time_saved`), every deployment loaded here on remote
    workers let go first: what a search does with models too large to hold all its
    candidates at once. ``deadline`` (``time.monotonic()``): no round starts
    that would end past it by the last round's length, so each has fewer samples (the first
    round always runs); with ``least`` too, no deployment's turn of the first round starts past
    it once ``least`` of them have samples, and those not reached have none (a search's
    confirmation of ViT-Large's plans, seconds a run on the emulated mesh: one round of four
    plans took minutes past its share). ``feeds``: the inputs (by name) every deployment
    loaded here runs on, where not the same random ones (a model whose shapes inside follow
    its data, a mixture of experts' routing, timed on its peer's inputs)."""
    if rounds < 1 or len(repeats) != len(deployments) or min(repeats, default=1) < 1:
        raise ValueError(f"rounds must be >= 1 and one repeat >= 1 a deployment, got "
                         f"{rounds}, {list(repeats)} for {len(deployments)}")  # fmt: skip
    peer_repeat = max(repeats, default=1)
    peer_s: list[list[float]] = [[] for _ in peers]
    samples: list[list[float]] = [[] for _ in deployments]
    workers = [
        {d.worker_id for d in dep.devices if d.worker_id} if isinstance(dep, Deployment)
        else set() for dep in deployments
    ]  # fmt: skip
    opened: dict[int, tuple[Executor, list]] = {}
    peer_workers = [getattr(peer, "worker_id", None) for peer in peers]  # a worker's: remote

    def release_peers(held: set[str] | None) -> None:  # those on ``held`` (None: any worker)
        for peer, worker in zip(peers, peer_workers, strict=True):
            if worker and (held is None or worker in held):
                peer.release()  # type: ignore[attr-defined]

    try:
        began = time.monotonic()
        for r in range(rounds):
            if r and deadline is not None:
                now = time.monotonic()
                if now + (now - began) > deadline:  # the last round's length again
                    break
                began = now
            for k, deployment in enumerate(deployments):
                runs = -(-repeats[k] * (r + 1) // rounds) - len(samples[k])
                if runs <= 0 or (not r and _cut(samples, deadline, least)):
                    continue
                if not isinstance(deployment, Deployment):  # a fresh process: its first run
                    # is the slow one; its workers (unknown here) may be held by one loaded
                    for j in [j for j in opened if workers[j]]:
                        opened.pop(j)[0].close()
                    release_peers(None)
                    settle = warmup if r == 0 else min(warmup, SETTLE_RUNS)
                    samples[k] += time_saved(deployment, runs, settle, microbatches)
                    continue
                fresh = k not in opened
                if fresh:
                    # a worker serves one session at a time: a deployment holding one of these
                    # workers is let go, the others stay loaded (a session opened each round
                    # loaded its library each round, seconds for GPT-2's 619 MB)
                    for j in [j for j in opened if workers[j] & workers[k]]:
                        opened.pop(j)[0].close()
                    release_peers(workers[k])
                    opened[k] = _opened(deployment, feeds)
                executor, tensors = opened[k]
                settle = warmup if fresh else min(warmup, SETTLE_RUNS)
                stats = executor.time(tensors, runs, settle, microbatches=microbatches)
                samples[k] += stats.samples_ms
            settle = min(warmup, SETTLE_RUNS)
            for k, peer in enumerate(peers):
                runs = -(-peer_repeat * (r + 1) // rounds) - len(peer_s[k])
                if runs > 0:
                    for j in [j for j in opened if peer_workers[k] in workers[j]]:
                        opened.pop(j)[0].close()  # the peer's worker serves it next
                    peer_s[k] += [t * 1e3 for t in peer(runs, warmup if r == 0 else settle)]
    finally:
        for executor, _ in opened.values():
            executor.close()
    return [tuple(t * 1e-3 for t in ms) for ms in samples + peer_s]


def _cut(samples: Sequence[list], deadline: float | None, least: int | None) -> bool:
    """Whether the first round stops here: past ``deadline`` with ``least`` timed."""
    if deadline is None or least is None or time.monotonic() <= deadline:
        return False
    return sum(1 for s in samples if s) >= least


def handoff_seconds(
    base: Deployment, apart: Deployment, hops: int, repeat: int, rounds: int = 5
) -> tuple[float, ...]:  # fmt: skip
    """What each handoff between two workers costs, one sample per run: ``apart`` (a chain of
    tiny units alternating between them, ``hops`` handoffs) timed end to end against the
    median of ``base`` (the same chain as one unit), the two in the same ``rounds``
    (:func:`interleaved_run_seconds`): timed one after the other, a busy spell of the host
    during ``base`` alone made every handoff read 0 (both take one input, ``x``)."""
    base_s, apart_s = interleaved_run_seconds(
        [base, apart], [repeat, repeat], rounds=max(1, min(rounds, repeat))
    )
    base_median = float(np.median(base_s))
    return tuple(max(0.0, (t - base_median) / hops) for t in apart_s)


def _start_worker(deployment: Deployment, k: int, inline: bool, timeout_s: float) -> Worker:
    spec, library = deployment.devices[k], deployment.libraries[k]
    if spec.host is not None:  # connecting waits as long as a step may (run --timeout)
        from tvm_hetero.runtime.remote_worker import RemoteWorker

        return RemoteWorker(spec, library, timeout_s=timeout_s)
    return LocalWorker(spec, library, inline=inline)


def _home_device(deployment: Deployment) -> tvm.runtime.Device:
    from tvm_hetero.runtime.device import runtime_device

    home = deployment.devices[0]
    return tvm.cpu(0) if home.host is not None else runtime_device(home)


def _to_numpy(values: Sequence[Any]) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for v in values:
        if isinstance(v, tvm.runtime.Tensor):
            out.append(array_of(v))
        elif isinstance(v, np.ndarray):  # a remote program's answer brought it back
            out.append(v)
        elif hasattr(v, "download"):  # a remote value
            out.extend([v.download()] if v.arity < 0 else _to_numpy([v[i] for i in range(v.arity)]))
        else:
            out.extend(_to_numpy(list(v)))
    return out
