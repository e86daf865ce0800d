"""A program per worker: the steps each worker runs in one request, in order, and what it waits for.

A deployment is a dataflow graph; :func:`worker_programs` turns it into one straight list of steps
per worker thread and the hand-overs between them. A worker then runs its list by itself for each
request, blocking only on a value another worker has not made yet; nobody counts down successors
or queues a job per step (what the dataflow executor paid for every unit: 20-43 us a unit
alternating between two workers, ``benchmarks/runtime/bench.py``).

Each step runs on one thread (its *owner*): a unit on its device's worker, a copy on the worker of
the device it copies onto (the consumer pulls), a tuple item where its tuple was made. Every
program lists its steps in the deployment's order, one topological order for all of them, so
programs cannot wait on each other in a cycle: the unfinished step that comes first in that order
has every input made, and is the next step of its owner. A pipelined run of several microbatches
runs each program once per microbatch in order (step ``k`` of microbatch ``i`` after every step of
microbatch ``i - 1`` on that worker), which is the stage order of a pipeline.

A value made on one thread and read on another is a *hand-over*: the producer sets its latch when
the step ends and the consumer waits on it. Pure: deployment in, programs out.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Collection
from dataclasses import dataclass

from tvm_hetero.runtime.deployment import Deployment


class NotProgrammable(ValueError):
    """A deployment whose values would have to be relayed through a remote worker that did
    not make them (the dataflow executor runs it)."""


@dataclass(frozen=True)
class Programs:
    """The programs of a deployment's workers.

    Attributes
    ----------
    owner : tuple of int
        Per step, the device whose worker runs it.
    steps : dict of int to tuple of int
        Per device with a worker, its steps in the order it runs them.
    waits : tuple of tuple of int
        Per step, the hand-overs between local threads (latch indices) it waits for.
    sets : tuple of tuple of int
        Per step, the hand-overs it sets when it ends.
    handovers : int
        How many latches a run has.
    sends : tuple of tuple of (int, str)
        Per step, the remote devices its value goes to as it ends, and under which name
        there: a remote worker pushes it to its peer, a local thread puts it there.
    start_sends : tuple of (str, int, str)
        The deployment inputs a remote worker reads: (input, device, name), sent by the
        caller before the workers start.
    remote : frozenset of int
        The devices whose worker is remote: their programs run there, one call a run.
    holder : tuple of int
        Per step, the device that holds its value: its owner's, but a copy onto a remote
        worker's value is held there, whoever sent it.
    forwarded : frozenset of int
        Copies from one remote worker onto another that no step reads (an output copied
        home): not sent, their value is their source's, held and answered where it is.
    """

    owner: tuple[int, ...]
    steps: dict[int, tuple[int, ...]]
    waits: tuple[tuple[int, ...], ...]
    sets: tuple[tuple[int, ...], ...]
    handovers: int
    sends: tuple[tuple[tuple[int, str], ...], ...] = ()
    start_sends: tuple[tuple[str, int, str], ...] = ()
    remote: frozenset[int] = frozenset()
    holder: tuple[int, ...] = ()
    forwarded: frozenset[int] = frozenset()

    @functools.cached_property
    def maker(self) -> dict[int, int]:
        """Per hand-over (latch index), the step that sets it: who is blamed when it does not
        come."""
        return {h: p for p, hs in enumerate(self.sets) for h in hs}


def worker_programs(
    deployment: Deployment, workers: Collection[int], remote: Collection[int] = ()
) -> Programs:  # fmt: skip
    """Split ``deployment`` into one program per device in ``workers`` (those with a worker;
    ``remote`` of them run theirs on another process or box).

    A copy onto a device without a worker (an output copied home where no unit runs) runs on the
    thread that made its source; so does an item (where its tuple was made), and a copy of a
    local value onto a remote worker (the local thread sends it as its step ends). A copy from
    one remote worker to another is sent by the producer (a push); one onto a local device is
    taken by the local thread (a pull, answered once the value exists there). A copy from one
    remote worker onto another that no step reads (an output copied home) is not made at all
    (``forwarded``): the caller takes the value from the worker holding its source, with that
    worker's answer (sent on, it cost a push to the home worker and a download from there
    after the run, about a fifth of a millisecond on loopback).

    Raises
    ------
    ValueError
        When a unit's device has no worker.
    NotProgrammable
        When a remote worker would have to pass on a value it did not make.
    """
    steps_ = deployment.steps
    index = {s.name: i for i, s in enumerate(steps_)}
    remote = frozenset(remote)
    fallback = min(workers, default=0)
    read = {v for s in steps_ for v in s.inputs}
    owner: list[int] = []
    holder: list[int] = []  # a copy onto a remote worker's value is held there, whoever sent it
    forwarded: set[int] = set()
    for i, step in enumerate(steps_):
        source = index.get(step.inputs[0]) if step.inputs else None
        made_by = owner[source] if source is not None else fallback
        onto_remote = step.kind == "copy" and step.device in remote
        if step.kind == "unit":
            if step.device not in workers:
                raise ValueError(f"unit {step.name!r} runs on device {step.device}, no worker")
            owner.append(step.device)
        elif onto_remote and source is not None and holder[source] in remote and (
            step.name not in read
        ):  # fmt: skip
            forwarded.add(i)
            owner.append(holder[source])
            holder.append(holder[source])
            continue
        elif step.kind == "copy" and step.device in workers:
            local_source = source is None or made_by not in remote
            owner.append(made_by if onto_remote and local_source else step.device)
        else:
            owner.append(made_by)
        holder.append(step.device if onto_remote else owner[i])
    latch: dict[tuple[int, int], int] = {}
    waits: list[tuple[int, ...]] = []
    sets: list[list[int]] = [[] for _ in steps_]
    sends: list[list[tuple[int, str]]] = [[] for _ in steps_]
    start_sends: list[tuple[str, int, str]] = []
    for i, step in enumerate(steps_):
        mine = []
        if i in forwarded:
            waits.append(())
            continue
        # a copy onto a remote worker: its source goes there under the copy's name
        onto_remote = step.kind == "copy" and step.device in remote
        to, name = (step.device, step.name) if onto_remote else (owner[i], None)
        for value in dict.fromkeys(step.inputs):
            p = index.get(value)
            if to in remote and (p is None or holder[p] != to):
                there = name or value
                if p is None:
                    start_sends.append((value, to, there))
                elif steps_[p].kind == "copy" and holder[p] in remote:
                    raise NotProgrammable(f"{value!r} would be passed on by a remote worker")
                elif (to, there) not in sends[p]:
                    sends[p].append((to, there))
                continue
            if p is None or holder[p] == owner[i] or holder[p] in remote:
                continue  # made here, an input, or pulled from the remote worker holding it
            key = (p, owner[i])
            if key not in latch:
                latch[key] = len(latch)
                sets[p].append(latch[key])
            mine.append(latch[key])
        waits.append(tuple(mine))
    steps = {k: tuple(i for i, o in enumerate(owner) if o == k) for k in sorted(workers)}
    return Programs(
        tuple(owner), steps, tuple(waits), tuple(map(tuple, sets)), len(latch),
        tuple(map(tuple, sends)), tuple(dict.fromkeys(start_sends)), remote, tuple(holder),
        frozenset(forwarded),
    )  # fmt: skip


class Latch:
    """Set once, waited on by one thread or more; a lock held until set (in a ping-pong
    between two threads on this host, 2026-11-28, a ``threading.Event`` woke its waiter in
    13 us, a lock in 8)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        """Wake every waiter (again: nothing)."""
        with contextlib.suppress(RuntimeError):  # already set
            self._lock.release()

    def is_set(self) -> bool:
        """Whether it is set, without waiting."""
        if not self._lock.acquire(blocking=False):
            return False
        self.set()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set (False when ``timeout`` seconds pass first)."""
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        self.set()  # let the next waiter through
        return True
