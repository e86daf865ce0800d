"""Runs of a deployment by programs (:mod:`.programs`): each worker started once a run.

A local worker's thread runs its program for every microbatch in turn, waiting on a latch for a
value another local thread hands over, taking a value a remote worker made from that worker's data
port (answered once it exists there), and sending what a remote worker reads to its data port as
the step that made it ends. A remote worker is sent its program once, at load; a run is one message
to it (a ``run`` command on its data port, the inputs it reads ahead of it) that runs every
microbatch there, and its values go to its peers by push; its answer brings back the outputs the
caller takes when the run ends (up to ``rpc_worker.RETURN_BYTES`` each: a download after the run
was one more round trip). The caller starts every worker and waits; where every worker is
remote, the caller's thread asks them all and takes their answers itself.
"""

from __future__ import annotations

import contextlib
import math
import select
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tvm

from tvm_hetero.errors import RunError
from tvm_hetero.runtime.programs import Latch
from tvm_hetero.runtime.remote_worker import RemoteValue
from tvm_hetero.runtime.rpc_worker import Answer
from tvm_hetero.runtime.runs import Event, Reported, Run, bare, release
from tvm_hetero.runtime.tensor_link import Asked

if TYPE_CHECKING:
    from tvm_hetero.runtime.executor import Executor
    from tvm_hetero.runtime.programs import Programs


def remote_ops(
    executor: Executor, device: int, read_here: set[str] | None = None
) -> list[dict[str, Any]]:  # fmt: skip
    """The program of remote worker ``device`` as it is sent there: its units and items, each
    with the peers its value is pushed to (data-port addresses; and whether that peer's
    program reads it, so it goes on the program link, or only the client downloads it),
    whether the client reads it from the worker (``held``: in ``read_here``, None for all; a
    native program hands only those to the session) and, for a unit, who makes each of its
    inputs (a value that does not arrive in time blames its maker)."""
    programs, steps = executor.programs, executor.deployment.steps
    ops: list[dict[str, Any]] = []
    for i in programs.steps[device]:
        step = steps[i]
        pushes = [
            [executor.workers[k].address[0], executor.workers[k].data_port, name,
             any(name in steps[j].inputs for j in programs.steps[k])]
            for k, name in programs.sends[i]
        ]  # fmt: skip
        held = read_here is None or step.name in read_here
        if step.kind == "unit":
            makers = {v: _maker(executor, v) for v in step.inputs}
            ops.append({"op": "unit", "step": i, "function": step.function, "out": step.name,
                        "inputs": list(step.inputs), "pushes": pushes, "from": makers,
                        "held": held})  # fmt: skip
        elif step.kind == "item":
            ops.append({"op": "item", "step": i, "src": step.inputs[0], "index": step.index,
                        "out": step.name, "pushes": pushes, "held": held})  # fmt: skip
    return ops


def _maker(executor: Executor, value: str) -> str | None:
    """The remote device that makes ``value`` (through copies and items), None for the client."""
    programs, index = executor.programs, executor.index
    while (i := index.get(value)) is not None and executor.deployment.steps[i].kind != "unit":
        value = executor.deployment.steps[i].inputs[0]
    if i is None or programs.owner[i] not in programs.remote:
        return None
    return executor.deployment.devices[programs.owner[i]].name


ANSWER_SPIN_S = 500e-6
"""How long the caller's thread, asking a remote worker alone for a run, spins for the answer
before it sleeps (:func:`~.native_remote.await_bytes`), where that worker's last answer came
within it: a sleeping thread's wake was a large part of a small remote request (with the
worker's own spin, ``rpc_worker.NEXT_RUN_SPIN_S``). Never for longer runs, nor when asking
several workers, whose cores the caller may share on an emulated cluster."""


def _grace(timeout_s: float) -> float:
    """How much longer than the programs' own waits a remote program is awaited (those waits
    blame the worker they wait for; the client blames the one that did not answer)."""
    return min(0.5 * timeout_s, 5.0)


class ProgramRunner:
    """Runs ``executor``'s deployment by its programs (``executor.programs``)."""

    def __init__(self, executor: Executor) -> None:
        self.ex = executor
        self._answer_s: dict[int, float] = {}  # a remote worker -> its last run's answer
        self._draining: set[int] = set()  # remote workers whose answers a client thread awaits
        programs: Programs = executor.programs
        remote, steps = programs.remote, executor.deployment.steps
        # what a local thread runs: not a copy onto a remote worker (its producer sent it)
        self.local = {
            k: tuple(i for i in mine if not (steps[i].kind == "copy" and steps[i].device in remote))
            for k, mine in programs.steps.items() if k not in remote
        }  # fmt: skip
        # values held on remote workers, each named there RUN/MICROBATCH:NAME: only those this
        # process reads have a placeholder here (one per step of a 1000-step model cost the
        # client a millisecond a run); a copy onto a device with no worker, or a forwarded
        # one (``Programs.forwarded``), is the value where its source is
        outputs = set(executor.deployment.outputs)
        read_locally = {v for mine in self.local.values() for i in mine for v in steps[i].inputs}
        read_here = outputs | read_locally
        self.held_remotely, self.aliases = [], []
        for i, step in enumerate(steps):
            if step.kind == "copy" and (
                step.device not in executor.workers or i in programs.forwarded
            ):  # fmt: skip
                self.aliases.append((step.name, step.inputs[0]))
                read_here.add(step.inputs[0])
                for readers in (outputs, read_locally):
                    if step.name in readers:
                        readers.add(step.inputs[0])
        aliased = {name for name, _ in self.aliases}
        # what each remote worker's answer brings back: the values the client takes only
        # when the run has ended (read there meanwhile, a value stays a RemoteValue)
        self.returns: dict[int, list[str]] = {k: [] for k in remote}
        for step, holder in zip(steps, programs.holder, strict=True):
            if holder in remote and step.name in read_here and step.name not in aliased:
                self.held_remotely.append((step.name, holder))
                if step.name in outputs and step.name not in read_locally:
                    self.returns[holder].append(step.name)
        self.names = [s.name for s in steps]
        self.run_id = 0
        self.not_native: dict[int, str] = {}  # remote workers running Python programs: why
        for k in remote:
            read = {name for name, holder in self.held_remotely if holder == k}
            why = executor.workers[k].load_program(remote_ops(executor, k, read), executor.native)
            if why:
                self.not_native[k] = why

    def run(self, batches: Sequence[Sequence[tvm.runtime.Tensor]]) -> list[dict[str, Any]]:
        """:meth:`Executor.run_many` by programs."""
        ex, programs = self.ex, self.ex.programs
        self.run_id += 1
        start = time.perf_counter()
        workers = len(self.local) + len(programs.remote)
        runs = [Run(workers, (), k, start) for k in range(len(batches))]
        starts: dict[int, list[tuple[str, Any]]] = {k: [] for k in programs.remote}
        for run, tensors in zip(runs, batches, strict=True):
            run.values.update(zip((i.name for i in ex.deployment.inputs), tensors, strict=True))
            run.latches = [Latch() for _ in range(programs.handovers)]
            prefix = f"{self.run_id}/{run.index}:"
            for name, k in self.held_remotely:
                run.values[name] = RemoteValue(ex.workers[k], prefix + name, -1)
            for name, source in self.aliases:
                if isinstance(run.values.get(source), RemoteValue):
                    run.values[name] = run.values[source]
            for value, k, name in programs.start_sends:  # sent with k's run, ahead of it
                starts[k].append((prefix + name, run.values[value]))
            if not ex.deployment.steps:
                run.done.set()
        if not self.local and not self._draining:
            self._remote_together(runs, starts)
            return ex.finish(runs, start)
        for device, steps in self.local.items():
            ex.workers[device].submit(lambda steps=steps: self._local(runs, steps))
        for device in programs.remote:
            ex.workers[device].submit(
                lambda device=device: self._remote(runs, device, starts[device])
            )  # fmt: skip
        return ex.finish(runs, start)

    def _local(self, runs: list[Run], steps: tuple[int, ...]) -> None:
        """One local worker's program (``steps``) for every run, on its thread. The program is
        cut into segments, each starting at a step that waits for another worker; the worker
        runs next the oldest microbatch whose next segment has its inputs (segment ``j`` of
        microbatch ``k`` after that of ``k - 1``), and waits on the oldest only when none has:
        a home worker whose program ends by taking a pipeline's output goes on with the next
        microbatch's first stage meanwhile (running each microbatch's program to its end
        first kept two stages from ever overlapping)."""
        waits = self.ex.programs.waits
        segments: list[list[int]] = []
        for i in steps:
            if not segments or waits[i]:
                segments.append([])
            segments[-1].append(i)
        done = [0] * len(runs)  # segments of each run this worker is through
        while True:
            choice = None
            for k, run in enumerate(runs):
                j = done[k]
                if j == len(segments) or (k and done[k - 1] <= j):
                    continue
                if choice is None:
                    choice = k  # waited on when no segment has its inputs
                if all(run.latches[h].is_set() for h in waits[segments[j][0]]):
                    choice = k
                    break
            if choice is None:
                break
            run = runs[choice]
            done[choice] += 1
            if not self._segment(run, segments[done[choice] - 1]):
                done[choice] = len(segments)
            if done[choice] == len(segments):
                self._end(run)
        if not segments:
            for run in runs:
                self._end(run)

    def _segment(self, run: Run, steps: list[int]) -> bool:
        """``steps`` of ``run`` on this thread; False when the run failed."""
        ex, programs = self.ex, self.ex.programs
        waits, sets, sends, names = programs.waits, programs.sets, programs.sends, self.names
        running = run.running
        for i in steps:
            for h in waits[i]:
                if not run.latches[h].wait(ex.timeout_s) and run.error is None:
                    # blamed on the step that did not hand it over (the watchdog may
                    # not have looked yet)
                    run.error = ex.overdue(ex.deployment.steps[programs.maker[h]])
            if run.error is not None:
                return False
            ex.perform(run, i)
            if run.error is not None:
                return False
            running.pop(i, None)
            for k, name in sends[i]:
                self._send(run, k, f"{self.run_id}/{run.index}:{name}", names[i])
            for h in sets[i]:
                run.latches[h].set()
        return True

    def _send(self, run: Run, device: int, name: str, value: str) -> None:
        """Value ``value`` sent to remote worker ``device`` as ``name``."""
        worker, start = self.ex.workers[device], time.perf_counter()
        try:
            worker.put(name, run.values[value])
        except BaseException as err:  # the worker's RunError
            run.error = run.error or bare(err)
            return
        end = time.perf_counter()
        run.events.append(
            Event(name.partition(":")[2], worker.name, "copy", start - run.start,
                  end - run.start, run.index)
        )  # fmt: skip

    def _remote(self, runs: list[Run], device: int, inputs: list[tuple[str, Any]]) -> None:
        """One remote worker's program for every run, on its client thread: one call with the
        client's ``inputs`` it reads."""
        ex, worker = self.ex, self.ex.workers[device]
        start = time.perf_counter()
        # judged later than the programs' own waits, which blame the worker they wait for
        for run in runs:
            run.running[-1 - device] = start + _grace(ex.timeout_s)
        ends: dict[int, float] = {}
        try:
            answer = worker.run_program(
                self.run_id, len(runs), ex.timeout_s, self.returns[device], inputs
            )  # fmt: skip
        except BaseException as err:
            self._failed(runs, device, err)
        else:
            ends = self._took(runs, device, start, answer)
        for run in runs:
            run.running.pop(-1 - device, None)
            self._end(run, ends.get(run.index))

    def _remote_together(self, runs: list[Run], starts: dict[int, list[tuple[str, Any]]]) -> None:
        """Every worker's program, when all are remote, asked from this thread: each request
        sent, then each answer taken as it comes (a dead worker's closed connection first,
        :meth:`_next_answer`), so no client thread is woken either way (a thread's hand-over
        and wake-up, each way, cost more than the round trip to a worker:
        benchmarks/runtime/programs.py --remote). No watchdog looks after this thread: an
        answer is awaited as long as the watchdog would have. After a failure, the answers
        still to come are taken on those workers' client threads, and runs go by those
        threads until they are (:attr:`_draining`: a worker serves one run at a time)."""
        ex, devices = self.ex, self.ex.programs.remote
        start = time.perf_counter()
        wait_s = ex.timeout_s + _grace(ex.timeout_s)
        deadline = start + wait_s
        asked = {}
        for device in devices:
            try:
                asked[device] = ex.workers[device].start_program(
                    self.run_id, len(runs), ex.timeout_s, self.returns[device], starts[device],
                    wait_s,
                )  # fmt: skip
            except BaseException as err:
                self._failed(runs, device, err)
                break
        ends: dict[int, dict[int, float]] = {}
        while asked:
            if any(run.error is not None for run in runs):
                for device, question in asked.items():
                    self._drain(device, question, deadline)
                break
            device = self._next_answer(asked, deadline)
            question = asked.pop(device)
            # asking one worker for runs that have been short: spin for the answer
            short = len(devices) == 1 and self._answer_s.get(device, math.inf) < ANSWER_SPIN_S
            try:
                answer = ex.workers[device].program_answer(
                    question, max(deadline - time.perf_counter(), 1e-3),
                    ANSWER_SPIN_S if short else 0.0,
                )  # fmt: skip
            except BaseException as err:
                self._failed(runs, device, err, late=time.perf_counter() >= deadline)
                continue
            self._answer_s[device] = time.perf_counter() - start
            ends[device] = self._took(runs, device, start, answer)
        for device in devices:
            for run in runs:
                self._end(run, ends.get(device, {}).get(run.index))

    @staticmethod
    def _next_answer(asked: dict[int, Asked], deadline: float) -> int:
        """The worker of ``asked`` whose answer (or whose connection's end: a dead worker)
        comes first, waited for until ``deadline``; the first asked if none comes."""
        if len(asked) > 1:
            conns = {conn: device for device, (_, conn) in asked.items()}
            ready, _, _ = select.select(list(conns), [], [], max(deadline - time.perf_counter(), 0))
            if ready:
                return conns[ready[0]]
        return next(iter(asked))

    def _drain(self, device: int, asked: Asked, deadline: float) -> None:
        """Take the answer to ``asked`` on ``device``'s client thread, by ``deadline``."""
        worker = self.ex.workers[device]
        self._draining.add(device)

        def drain() -> None:
            with contextlib.suppress(Exception):
                worker.program_answer(asked, max(deadline - time.perf_counter(), 1e-3))
            self._draining.discard(device)

        worker.submit(drain)

    def _failed(self, runs: list[Run], device: int, err: BaseException, late: bool = False) -> None:
        """Every run of ``runs`` failed by ``device``'s program: ``err``, or (``late``) what the
        watchdog would have said."""
        failure = self.ex.overdue(device) if late else err
        if not isinstance(failure, RunError):
            failure = RunError(f"run: {err}", self.ex.workers[device].name)
        error = bare(failure)
        for run in runs:
            run.error = run.error or error

    def _took(self, runs: list[Run], device: int, asked: float, answer: Answer) -> dict[int, float]:
        """``device``'s ``answer`` (its steps' rows and returned tensors) to a program asked
        at ``asked``, taken into ``runs``; when its last step of each run ended. The rows are
        placed from when the program started, where the worker shares this process's clock
        (its start lies between the ask and now: a worker of this machine), else from the ask
        (the worker's request and wake-up then count as its first step's wait; placed from
        the ask, a FlexPie plan on four workers showed a step taking a piece a millisecond
        before its maker had made it)."""
        name, steps, ends = self.ex.workers[device].name, self.ex.deployment.steps, {}
        start = answer.started if asked <= answer.started <= time.perf_counter() else asked
        rows = answer.events
        for run in runs:
            mine = rows if len(runs) == 1 else rows[rows[:, 1] == run.index]
            if len(mine):
                ends[run.index] = start + float(mine[:, 3].max())
                run.reported.append(Reported(name, start - run.start, mine))
        for i, k, *_, arity in rows[rows[:, 5] >= 0].tolist():  # tuples
            values, step = runs[int(k)].values, steps[int(i)].name
            held = values.get(step)
            if held is not None:  # a tuple this process reads
                values[step] = RemoteValue(held.worker, held.name, int(arity))
        for (k, value), array in answer.tensors.items():
            runs[k].values[value] = array
            for alias, source in self.aliases:
                if source == value:
                    runs[k].values[alias] = array
        return ends

    def _end(self, run: Run, at: float | None = None) -> None:
        """A worker is done with ``run``, now or (a remote worker, which answers once for
        every microbatch) when its last step of the run ended, ``at``; the run ends when its
        last worker is done (a failed run's hand-overs are all set, so no program waits for a
        value that will not come)."""
        if run.error is not None:
            release(run)
            run.done.set()
        at = time.perf_counter() if at is None else at
        with run.lock:
            run.pending -= 1
            run.end = max(run.end, at)
            finished = run.pending == 0
        if finished:
            run.done.set()
