"""One run of a deployment as the runtime keeps it: values, events, completion; its timeline."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tvm_hetero.runtime.programs import Latch


class Event(NamedTuple):
    """One unit or copy of a run: where and when it ran (seconds from the run's start), for
    which microbatch of a pipelined run, and how long of it a unit waited on its worker for an
    input still arriving (a remote worker says; a local unit starts with its inputs there).
    (A named tuple: made on every step of every run, and a frozen dataclass took 1.5 us.)"""

    step: str
    worker: str
    kind: str
    start_s: float
    end_s: float
    microbatch: int = 0
    waited_s: float = 0.0

    @property
    def busy_s(self) -> float:
        """Its time on the worker, less what it waited there for inputs."""
        return self.end_s - self.start_s - self.waited_s


@dataclass(frozen=True)
class Timeline:
    """The measured timeline of one run."""

    events: tuple[Event, ...]
    total_s: float

    def busy_s(self, worker: str) -> float:
        """Time ``worker`` spent in units and copies, less what its units waited for inputs."""
        return sum(e.busy_s for e in self.events if e.worker == worker)

    def waited_s(self, worker: str) -> float:
        """Time ``worker``'s units waited there for inputs still arriving."""
        return sum(e.waited_s for e in self.events if e.worker == worker)

    def in_flight_s(self, steps: Sequence[Any]) -> dict[tuple[str, int], float]:
        """Per unit run (``(step, microbatch)``) whose last input to come was made on another
        device: seconds from when that input's unit ended (made, and sent on) to when this
        unit had every input (its start and what it waited): the move and the reader's
        wake-up as the run paid them. ``steps``: the deployment's (``kind``, ``name``,
        ``inputs``), through whose copies and tuple items an input is traced to its unit."""
        by_name = {s.name: s for s in steps}
        units = [e for e in self.events if e.kind == "unit"]
        ends = {(e.step, e.microbatch): e.end_s for e in units}
        flights = {}
        for e in units:
            made = []
            for name in by_name[e.step].inputs:
                step, crossed = by_name.get(name), False
                while step is not None and step.kind != "unit":  # copies and tuple items
                    crossed |= step.kind == "copy"
                    step = by_name.get(step.inputs[0]) if step.inputs else None
                end = None if step is None else ends.get((step.name, e.microbatch))
                if end is not None:
                    made.append((end, crossed))
            if made and max(made)[1]:
                flights[e.step, e.microbatch] = e.start_s + e.waited_s - max(made)[0]
        return flights

    def overlap_s(self, a: str, b: str) -> float:
        """Time during which workers ``a`` and ``b`` both ran something."""
        total = 0.0
        for x in (e for e in self.events if e.worker == a):
            for y in (e for e in self.events if e.worker == b):
                total += max(0.0, min(x.end_s, y.end_s) - max(x.start_s, y.start_s))
        return total


class Reported(NamedTuple):
    """A remote worker's rows of one run's steps (``step, microbatch, start, end, waited,
    arity``, from its answer: :func:`~tvm_hetero.runtime.rpc_worker.read_program_answer`),
    ``offset_s`` the answer's clock from the run's start."""

    worker: str
    offset_s: float
    rows: Any


def reported_events(reported: list[Reported], steps: Any) -> list[Event]:
    """The events of the unit steps (``steps``: a deployment's) in ``reported``."""
    events = []
    for worker, offset, rows in reported:
        for i, k, start, end, waited, _ in rows.tolist():
            step = steps[int(i)]
            if step.kind == "unit":
                events.append(
                    Event(step.name, worker, "unit", offset + start, offset + end, int(k), waited)
                )  # fmt: skip
    return events


class NoEvent:
    """What a serial run has for ``done``: nobody waits on it."""

    def set(self) -> None:
        """Nothing to wake."""


class Run:
    """State of one run: values, countdowns, events, completion."""

    def __init__(
        self, n_steps: int, deps: list[int], index: int = 0, start: float = 0.0,
        concurrent: bool = True,
    ) -> None:  # fmt: skip
        self.index = index  # the microbatch
        self.values: dict[str, Any] = {}
        self.remaining = list(deps)
        self.pending = n_steps
        self.lock = threading.Lock()
        # a run in the calling thread alone waits on nothing
        self.done = Latch() if concurrent else NoEvent()
        self.latches: list[Latch] = []  # a run of programs: its hand-overs
        self.error: BaseException | None = None
        self.events: list[Event] = []
        # remote workers' rows of this run's steps, made into events when the timeline is read
        self.reported: list[Reported] = []
        self.running: dict[int, float] = {}  # step -> when it started on its worker
        self.pushed: dict[int, Any] = {}  # copy step -> the value its producer pushes
        self.start = start or time.perf_counter()
        self.end = 0.0


def release(run: Run) -> None:
    """Set every hand-over of a failed run, so no program waits for a value that will not
    come (each sees ``run.error`` and stops)."""
    for latch in run.latches:
        latch.set()


def bare(error: BaseException) -> BaseException:
    """``error`` without its traceback and the exceptions it was raised from: a run keeps its
    error, and those frames' locals hold workers' RPC sessions (a remote worker serves one
    session at a time, so the next client waited for one that a kept error held open)."""
    error.__traceback__ = error.__context__ = error.__cause__ = None
    return error
