"""Programs of local CPU workers run by native code: no Python between two units.

A run by programs (:mod:`.program_runner`) still runs Python on every step: the worker thread
takes the GIL to call the next unit, to set a latch and to wait on one, and a thread that sleeps
on a latch wakes in about 30 us on this host's virtual cores (a C futex ping-pong, 2026-11-29),
so a crossing between two workers cost some 34 us. Here the same programs run in C
(``native/programs.c``, built with the system's C compiler at first use and cached): each
worker thread makes one FFI call (``serve``), with the GIL released, that calls its units
through TVM FFI's C API, hands values over by latches that spin a while before they sleep
(``spin_s``: a worker spins only on its own cores, as TVM's thread pool does between parallel
regions) and, after a request, spins a while for the next one before it returns; the caller
waits on a futex until the last worker is through.

It runs deployments whose workers are all local CPU threads: units, tuple items and copies
between CPU workers (which move no bytes). Anything else (a GPU, a remote worker), or no C
compiler, runs by the Python programs (:func:`unavailable` says why).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tvm
import tvm_ffi

from tvm_hetero.errors import RunError
from tvm_hetero.runtime.native_build import build_native
from tvm_hetero.runtime.program_links import SPIN_S
from tvm_hetero.runtime.runs import Event, Timeline

if TYPE_CHECKING:
    from tvm_hetero.runtime.executor import Executor

SOURCE = Path(__file__).with_name("native") / "programs.c"

UNIT, ITEM, ALIAS = 0, 1, 2
OK, FAILED, TIMED_OUT = 0, 1, 2


def functions() -> dict[str, Any] | None:
    """The native functions (``tvm_hetero.native.*`` by their last part), or None when they
    cannot be built here (:func:`unavailable` says why). Built and loaded once a process."""
    names = ("new", "function", "begin", "put", "serve", "start", "wait", "take",
             "times", "status", "failure", "abort", "running", "free")  # fmt: skip
    return load_native(SOURCE, "tvm_hetero_native_register", "tvm_hetero.native", names)


_loaded: dict[Path, dict[str, Any] | str] = {}
"""By C source: its functions, or why they cannot be loaded here."""


def load_native(
    source: Path, register: str, prefix: str, names: Sequence[str]
) -> dict[str, Any] | None:  # fmt: skip
    """The FFI functions ``prefix.NAME`` for each of ``names`` that C ``source`` registers
    (its ``register`` function), built and loaded once a process; None when they cannot be
    (:func:`why_not` says why: ``TVM_HETERO_NATIVE=0``, no C compiler)."""
    if source not in _loaded:
        if os.environ.get("TVM_HETERO_NATIVE", "1") == "0":
            _loaded[source] = "TVM_HETERO_NATIVE=0"
            return None
        try:
            library = ctypes.CDLL(str(build_native(source)))
            if getattr(library, register)() != 0:
                raise OSError("registering its functions failed")
        except (OSError, subprocess.SubprocessError) as err:
            _loaded[source] = f"native programs unavailable: {err}"
            return None
        _loaded[source] = {n: tvm_ffi.get_global_func(f"{prefix}.{n}") for n in names}
    loaded = _loaded[source]
    return loaded if isinstance(loaded, dict) else None


def why_not(source: Path) -> str | None:
    """Why C ``source``'s functions could not be loaded (:func:`load_native`), or None."""
    loaded = _loaded.get(source)
    return loaded if isinstance(loaded, str) else None


def unavailable() -> str | None:
    """Why native programs cannot run in this process, or None."""
    functions()
    return why_not(SOURCE)


class NotNative(ValueError):
    """A deployment the native programs do not run (the reason is the message)."""


class NativeValues(Mapping):
    """Every value of one run by name, read from the array the run's slots were taken into."""

    def __init__(self, array: Any, slots: Mapping[str, int]) -> None:
        self._array, self._slots = array, slots

    def __getitem__(self, name: str) -> Any:
        value = self._array[self._slots[name]]
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._slots)

    def __len__(self) -> int:
        return len(self._slots)


class NativeRunner:
    """Runs ``executor``'s deployment by its programs, natively.

    Raises
    ------
    NotNative
        When a worker is not a local CPU thread, a copy moves bytes, or the library cannot be
        built here.
    """

    def __init__(self, executor: Executor, spin_s: float = SPIN_S) -> None:
        from tvm_hetero.runtime.worker import LocalWorker

        fns = functions()
        if fns is None:
            raise NotNative(unavailable())
        deployment, programs = executor.deployment, executor.programs
        assert programs is not None
        for worker in executor.workers.values():
            if not isinstance(worker, LocalWorker) or worker.anywhere or not worker.threaded:
                raise NotNative(f"worker {worker.name} is not a local CPU thread")
            if worker.spec.kind.value != "cpu":
                raise NotNative(f"worker {worker.name} is not a CPU")
        if len(executor.workers) > 62:
            raise NotNative(f"{len(executor.workers)} workers (62 at most: a bit each)")
        steps = deployment.steps
        for step in steps:
            if step.kind == "copy" and step.device in executor.workers and deployment.moves(step):
                raise NotNative(f"copy {step.name!r} moves bytes")
        self.ex, self.fns, self.spin_s = executor, fns, spin_s
        names = [i.name for i in deployment.inputs] + [s.name for s in steps]
        self.slots = {n: k for k, n in enumerate(names)}
        self.devices = sorted(programs.steps)
        self.units = [i for i, s in enumerate(steps) if s.kind == "unit"]
        table, self.functions = self._table()
        self.plan = fns["new"](table.ctypes.data, len(table), float(executor.timeout_s))
        for k, (device, name) in enumerate(self.functions):
            fns["function"](self.plan, k, executor.workers[device].vm.module[name])
        self._jobs = [
            (executor.workers[device], lambda w=w: fns["serve"](self.plan, w))
            for w, device in enumerate(self.devices)
        ]
        self.stuck = False
        self.last_s = 1.0  # how long the last request took: the caller spins up to that
        # ... where a core is left to it (on a host the workers fill, its spin slows one)
        used = {c for k in self.devices for c in executor.workers[k].spec.cores or ()}
        self.caller_spins = bool(used) and len(used) < len(os.sched_getaffinity(0))

    def replace(self, index: int, function: Any) -> None:
        """Call ``function`` for unit function ``index`` of :attr:`functions` ((device,
        name) pairs) from the next request on (what a test freezes or fails a unit by)."""
        self.fns["function"](self.plan, index, function)

    def _table(self) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """The plan as ``programs.c``'s ``new`` reads it, and the unit functions by index."""
        programs, steps = self.ex.programs, self.ex.deployment.steps
        assert programs is not None
        fields: list[int] = []
        ints: list[int] = []
        function_index: dict[tuple[int, str], int] = {}
        for i, step in enumerate(steps):
            kind, function, index = ALIAS, -1, -1
            if step.kind == "unit":
                kind = UNIT
                key = (step.device, step.function)
                function = function_index.setdefault(key, len(function_index))
            elif step.kind == "item":
                kind, index = ITEM, step.index
            ins = [self.slots[v] for v in step.inputs]
            waits, sets = programs.waits[i], programs.sets[i]
            fields += [kind, function, self.slots[step.name], index, len(ins), len(ints)]
            ints += ins
            fields += [len(waits), len(ints)]
            ints += waits
            fields += [len(sets), len(ints)]
            ints += sets
        mine = [programs.steps[d] for d in self.devices]
        head = [len(steps), len(self.slots), programs.handovers, len(mine), len(function_index)]
        # a worker pinned to its own cores spins; an unpinned one may share them: it sleeps
        spins = [round(self.spin_s * 1e6) if self.ex.workers[d].spec.cores else 0
                 for d in self.devices]  # fmt: skip
        table = [*head, *fields, len(ints), *ints, *map(len, mine), *(i for m in mine for i in m),
                 *spins]  # fmt: skip
        return np.asarray(table, dtype="int32"), list(function_index)

    def run(self, batches: Sequence[Sequence[tvm.runtime.Tensor]]) -> list[Mapping[str, Any]]:
        """:meth:`Executor.run_many` natively."""
        ex, fns = self.ex, self.fns
        if self.stuck and not fns["wait"](self.plan, 0.0, 0.0):
            busy = [fns["running"](self.plan, w)[0] for w in range(len(self.devices))]
            raise ex.overdue(ex.deployment.steps[max(busy)] if max(busy) >= 0 else self.devices[0])
        self.stuck = False
        fns["begin"](self.plan, len(batches))
        for r, tensors in enumerate(batches):
            for k, tensor in enumerate(tensors):
                fns["put"](self.plan, r, k, tensor)
        start = time.perf_counter()
        jobs = fns["start"](self.plan)  # a bit for each worker not spinning for this request
        for w, (worker, job) in enumerate(self._jobs):
            if jobs >> w & 1:
                worker.submit(job)
        self._wait(start)
        self.last_s = time.perf_counter() - start
        times = np.empty(2 * len(batches) * len(ex.deployment.steps) + len(batches))
        fns["times"](self.plan, times.ctypes.data)
        status = fns["status"](self.plan)
        if status != OK:
            step, latch, message = fns["failure"](self.plan)
            if status == TIMED_OUT:
                raise ex.overdue(ex.deployment.steps[ex.programs.maker[latch]])
            failed = ex.deployment.steps[step]  # (a step of this request: abort raised above)
            device = None if failed.device is None else ex.deployment.devices[failed.device].name
            where = f"{failed.kind} {failed.name!r}" + (f" on {device}" if device else "")
            raise RunError(f"run: {where} failed: {message}", device)
        values = [NativeValues(fns["take"](self.plan, r), self.slots) for r in range(len(batches))]
        self._keep_timeline(times, len(batches), start)
        return values

    def _wait(self, start: float) -> None:
        """Until every worker is through the request, or a unit has run longer than the
        timeout, or a worker has not begun its program within it (its thread busy with
        something else): the run then fails naming the worker."""
        ex, fns = self.ex, self.fns
        # the caller spins (taking a core from a worker) only for a request as short as a
        # wake from sleep; a longer one it sleeps through
        spin = min(SPIN_S, 2 * self.last_s) if self.caller_spins and self.last_s < SPIN_S else 0.0
        while not fns["wait"](self.plan, min(1.0, ex.timeout_s), spin):
            now = time.perf_counter()
            for w, device in enumerate(self.devices):
                step, since, started = fns["running"](self.plan, w)
                late = step >= 0 and now - since > ex.timeout_s
                if late or (not started and now - start > ex.timeout_s):
                    self.stuck = True
                    fns["abort"](self.plan)  # the other workers stop waiting for it
                    raise ex.overdue(ex.deployment.steps[step] if late else device)

    def _keep_timeline(self, times: np.ndarray, runs: int, start: float) -> None:
        """When each run ended, and the request's timeline, made when it is first read."""
        ex, n = self.ex, len(self.ex.deployment.steps)
        finished = times[2 * runs * n :] - start
        ex.finished_s = tuple(finished.tolist())

        def timeline() -> Timeline:
            steps = ex.deployment.steps
            began = times[: runs * n].reshape(runs, n) - start
            ended = times[runs * n : 2 * runs * n].reshape(runs, n) - start
            names = [ex.workers[s.device].name if s.kind == "unit" else "" for s in steps]
            events = tuple(
                Event(steps[i].name, names[i], "unit", b[i], e[i], r)
                for r, (b, e) in enumerate(zip(began.tolist(), ended.tolist(), strict=True))
                for i in self.units
            )  # fmt: skip
            return Timeline(events, float(finished.max(initial=0.0)))

        ex.timeline = timeline

    def close(self) -> None:
        """Free the plan (left alone while a stuck worker is still in it)."""
        with contextlib.suppress(Exception):
            self.fns["free"](self.plan)
