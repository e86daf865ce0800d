"""A worker on another machine (or process): a TVM RPC session to ``tvm-hetero worker``.

The client uploads the device's library once (:mod:`.uploads`) and then drives it by name: a
unit's inputs and result stay on the worker as named values (:class:`RemoteValue`); a value
another worker needs is pulled by that worker straight from this one (:mod:`.tensor_link`),
never through the client. The client sends the model's inputs and receives its outputs only.

One TVM RPC session is not safe to share between threads, so every use of it holds the worker's
lock; the worker's jobs run on its own thread like a local worker's.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from tvm_hetero.devices.spec import DeviceKind, DeviceSpec
from tvm_hetero.errors import RunError
from tvm_hetero.runtime import program_links
from tvm_hetero.runtime.exported import exported_library
from tvm_hetero.runtime.instrument import CPU_DEVICE
from tvm_hetero.runtime.native_remote import await_bytes
from tvm_hetero.runtime.rpc_worker import (
    PREFIX,
    PROTOCOL,
    RUN,
    Answer,
    WorkerSaid,
    read_status_answer,
)
from tvm_hetero.runtime.tensor_link import Asked, TensorFetcher, recv_frame, send_command
from tvm_hetero.runtime.uploads import upload
from tvm_hetero.runtime.worker import JobThread

_FUNCTIONS = ("data_port", "load", "call", "call_push", "item", "load_program")


def _connect_within(timeout_s: float, where: str, *address: Any) -> Any:
    """``tvm.rpc.connect(*address)``, or ``TimeoutError`` when the worker has not answered
    within ``timeout_s`` (TVM's handshake waits on the socket with no limit; the thread left
    waiting ends with the session it would have had, dropped)."""
    done: dict[str, Any] = {}

    def connect() -> None:
        try:
            done["session"] = tvm.rpc.connect(*address, session_timeout=0)
        except BaseException as err:  # handed to the caller's thread
            done["error"] = err

    thread = threading.Thread(target=connect, name=f"connect {where}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(where)
    if "error" in done:
        raise done["error"]
    return done["session"]


def connect_worker(spec: DeviceSpec, timeout_s: float = 10.0) -> tuple[Any, tuple[str, int]]:
    """A TVM RPC session with the device's worker, and the worker's ``(host, port)``.

    A device with a ``key`` is requested from the TVM RPC tracker at ``spec.host``: the tracker
    names a free worker of that key and the match key it accepts (what ``tracker.request`` does,
    keeping the address, which the tensor link needs). Waits ``timeout_s`` for a free worker,
    and as long for the worker's answer: a worker, like TVM's RPC server, serves one session at
    a time, and a second one waits, without a word, until the first ends.

    Raises
    ------
    RunError
        When the worker (or the tracker, or a free worker of the key) cannot be had, naming it.
    """
    from tvm.rpc import base

    where = f"{spec.name} ({spec.host}{f', key {spec.key}' if spec.key else ''})"
    try:
        if spec.key is None:
            return _connect_within(timeout_s, where, *spec.address), spec.address
        with socket.create_connection(spec.address, timeout=timeout_s) as tracker:
            tracker.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # 2 writes a message
            tracker.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            if struct.unpack("<i", base.recvall(tracker, 4))[0] != base.RPC_TRACKER_MAGIC:
                raise RunError(f"{spec.host} is not a TVM RPC tracker")
            base.sendjson(tracker, [base.TrackerCode.REQUEST, spec.key, "", 1])
            reply = base.recvjson(tracker)
        if reply[0] != base.TrackerCode.SUCCESS:
            raise RunError(f"the tracker refused: {reply}")
        host, port, matchkey = reply[1]
        return _connect_within(timeout_s, where, host, port, matchkey), (host, int(port))
    except TimeoutError:
        raise RunError(
            f"no free worker for {where} within {timeout_s:g} s (a worker serves one session "
            "at a time: is another client using it?)", spec.name,
        ) from None  # fmt: skip
    except (RuntimeError, OSError) as err:
        if isinstance(err, RunError):
            raise RunError(f"cannot reach worker {where}: {err}", spec.name) from None
        raise RunError(f"cannot reach worker {where}: {error_line(err)}", spec.name) from None


@dataclass(frozen=True)
class RemoteValue:
    """A value held by a remote worker: a tensor (``arity`` -1) or a tuple of ``arity``;
    ``waited_s``: how long the unit that made it waited on the worker for its inputs to arrive
    (pulled or sent while the unit was already called); ``items``: for a unit's tuple, the
    arity of each item, which the worker holds by name already."""

    worker: RemoteWorker
    name: str
    arity: int
    waited_s: float = 0.0
    items: tuple[int, ...] = ()  # a unit's tuple: its items' arities, held as ``NAME.I``

    def __getitem__(self, index: int) -> RemoteValue:
        return self.worker.item(self, index)

    def __len__(self) -> int:
        return max(self.arity, 0)

    def download(self) -> np.ndarray:
        """The tensor's bytes, here."""
        return self.worker.download(self)


class RemoteWorker:
    """Runs the units of one device on a ``tvm-hetero worker``.

    Parameters
    ----------
    spec : DeviceSpec
        The device; ``spec.host`` is the worker's ``HOST:PORT``.
    library : path or tvm.runtime.Executable
        The device's compiled units: a ``.so`` file, or an executable to export.
    timeout_s : float
        Connecting longer than this fails (a run's own timeout is the executor's).

    Raises
    ------
    RunError
        When the worker cannot be reached or refuses the library, naming the device and address.
    """

    def __init__(self, spec: DeviceSpec, library: Any, timeout_s: float = 10.0) -> None:
        self.spec, self.name = spec, spec.name
        self.session, self.address = connect_worker(spec, timeout_s)
        self.where = f"{spec.name} ({':'.join(map(str, self.address))})"
        self._lock = threading.Lock()  # one RPC at a time: held while the worker computes
        self._names_lock = threading.Lock()  # not that lock: a pull for this worker is named
        # while it computes (under it, every pull waited for the unit before: on a 10 Mbit/s
        # link a stage's period was its compute plus its transfer, not the larger of them)
        self._names = 0
        self._run = 0  # names are RUN/NAME: the worker lets the last run's values go
        self._remote = {f: self.session.get_function(PREFIX + f) for f in _FUNCTIONS}
        check_protocol(self.session, self.where, self.name)
        self.device = (
            self.session.cuda(spec.index) if spec.kind is DeviceKind.CUDA else self.session.cpu(0)
        )
        path = Path(library) if isinstance(library, str | Path) else exported_library(library)
        self.data_port = self._rpc("connect", lambda: int(self._remote["data_port"]()))
        self.sent_library = self._rpc(
            "upload", lambda: upload(self.address[0], self.data_port, path, "lib.so", timeout_s)
        )  # False: the worker kept these bytes from an earlier session
        self._rpc("load", lambda: self._remote["load"]("lib.so", json.dumps(spec.to_dict())))
        self._thread = JobThread(f"tvm-hetero:{spec.name}", lambda: None)
        self._teller = TensorFetcher()  # pull commands to this worker's data port
        self._runs = TensorFetcher(timeout_s)  # program runs there (run_program)
        self._given_up = False  # a run's answer was not awaited to its end
        self._puller = TensorFetcher(timeout_s)  # downloads from it

    def _rpc(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` under the lock; a failure is this worker's, or a peer's when this worker
        says pulling from that peer failed."""
        with self._lock:
            try:
                return fn()
            except (RuntimeError, OSError) as err:  # TVMError is a RuntimeError
                peer = re.search(r"LinkError from (\S+):", str(err))
                blame = peer.group(1) if peer else self.name
                raise RunError(f"worker {self.where}: {what} failed: {err}", blame) from None

    def _fresh(self, what: str) -> str:
        with self._names_lock:
            self._names += 1
            return f"{self._run}/{what}{self._names}"

    def begin_run(self) -> None:
        """A new run: names restart under a new run number, and the worker lets the last run's
        values go (receiving into their tensors), so nothing piles up; nothing is sent."""
        with self._names_lock:
            self._run, self._names = self._run + 1, 0

    def submit(self, job: Callable[[], None], priority: int = 0) -> None:
        """Queue ``job`` on the worker's client thread."""
        self._thread.submit(job, priority)

    def _held(self, value: Any) -> str:
        """The name under which this worker holds ``value``, moving it here first if need be."""
        if isinstance(value, RemoteValue) and value.worker is self:
            return value.name
        return self.move(value).name

    def call(
        self, function: str, args: Sequence[Any], pushes: Sequence[tuple[int, RemoteValue]] = ()
    ) -> RemoteValue:
        """Run unit ``function`` on the worker; its result stays there, and each of ``pushes``
        (an item's index, ``-1`` for the whole result, and the :meth:`expect`-ed value of
        another worker) is sent on to that worker as soon as the unit ends."""
        names = [self._held(a) for a in args]
        out = self._fresh("v")
        to = json.dumps([[i, v.worker.address[0], v.worker.data_port, v.name] for i, v in pushes])

        def call() -> str:
            if pushes:
                return self._remote["call_push"](function, out, to, *names)
            return self._remote["call"](function, out, *names)

        arity, waited, items = json.loads(self._rpc(f"unit {function}", call))
        return RemoteValue(self, out, int(arity), float(waited), tuple(items))

    def expect(self) -> RemoteValue:
        """A value another worker will push here (see :meth:`call`); a unit that reads it waits
        for it on the worker."""
        return RemoteValue(self, self._fresh("m"), -1)

    def item(self, value: RemoteValue, index: int) -> RemoteValue:
        """Element ``index`` of a tuple this worker holds: named without a call for a unit's
        tuple (a call waited for the unit the worker was running: two or three per tiled
        segment on the critical path), else taken by a call."""
        if value.items:
            return RemoteValue(self, f"{value.name}.{index}", value.items[index])
        out = self._fresh("i")
        arity = self._rpc("item", lambda: self._remote["item"](value.name, index, out))
        return RemoteValue(self, out, int(arity))

    def move(self, value: Any) -> RemoteValue:
        """``value`` held here: pulled from its worker, or sent from this process. Either way
        through the worker's data port, without waiting: it receives while it computes (an
        input sent over RPC waited for the unit before it, as TVM's server answers one request
        at a time); a unit that reads the value waits for it there."""
        if isinstance(value, RemoteValue) and value.worker is self:
            return value
        out = self._fresh("m")
        if isinstance(value, RemoteValue):
            peer = value.worker
            pull = [peer.address[0], peer.data_port, value.name, out, peer.name]
            self._tell({"pull": pull}, f"pull of {value.name}")
        else:
            array = value.numpy() if isinstance(value, tvm.runtime.Tensor) else np.asarray(value)
            self._tell({"put": out}, "upload of an input", array)
        return RemoteValue(self, out, -1)

    def put(self, name: str, value: Any) -> None:
        """Send ``value`` (a tensor or array of this process) to be held there as ``name``,
        through the data port, not waiting for the worker."""
        self._tell({"put": name}, f"upload of {name.partition(':')[2] or name}", _array(value))

    def load_program(self, ops: list[dict[str, Any]], native: bool = True) -> str:
        """Send the worker its program (:mod:`tvm_hetero.runtime.program_runner`), to run
        natively where ``native`` and the worker can; "" when it does, else why not. The
        worker learns its data port as its peers are told it (the ``back`` of its program
        links: :mod:`~tvm_hetero.runtime.program_links`)."""
        me = json.dumps([self.address[0], self.data_port]) if program_links.BOTH_WAYS else ""
        return str(self._rpc(
            "program load", lambda: self._remote["load_program"](json.dumps(ops), native, me)
        ))  # fmt: skip

    def run_program(
        self, run: int, microbatches: int, wait_s: float, returns: Sequence[str] = (),
        inputs: Sequence[tuple[str, Any]] = (), answer_s: float | None = None,
        spin_s: float = 0.0,
    ) -> Answer:  # fmt: skip
        """Run the worker's program for ``microbatches`` of run ``run``: one message each way,
        on the worker's data port (``inputs``, the client's values it reads as ``(name,
        tensor or array)``, sent ahead of the command on the same connection, so they are held
        there when the program starts; TVM RPC's round trip cost more than the rest of a
        small model's run; ``answer_s``: how long the answer is awaited, None: until it comes
        or :meth:`close`; ``spin_s``: how long to spin for it before sleeping,
        :func:`~.native_remote.await_bytes`). An :class:`~.rpc_worker.Answer`: per step, a
        row of ``step, microbatch, start, end, waited, arity`` (seconds from the program's
        start; an array); the tensors named in ``returns`` that came back with the answer, by
        ``(microbatch, name)`` (one too large to come back is not there: download it); when
        the program started, on the worker's clock. What this process names there afterwards
        (an output tuple's item) is named in run ``run``: the worker takes a name of an older
        run for a late arrival and drops it. In two halves: :meth:`start_program` and
        :meth:`program_answer`."""
        asked = self.start_program(run, microbatches, wait_s, returns, inputs, answer_s)
        return self.program_answer(asked, answer_s, spin_s)

    def start_program(
        self, run: int, microbatches: int, wait_s: float, returns: Sequence[str] = (),
        inputs: Sequence[tuple[str, Any]] = (), send_s: float | None = None,
    ) -> Asked:  # fmt: skip
        """:meth:`run_program`'s request, sent (within ``send_s``); its answer is taken by
        :meth:`program_answer`."""
        with self._names_lock:
            self._run, self._names = run, 0
        puts = [(name, _array(value)) for name, value in inputs]
        message = {RUN: [run, microbatches, wait_s, list(returns)]}
        try:
            return self._runs.question(self.address[0], self.data_port, message, puts, send_s)
        except OSError as err:
            raise self._given_up_on(err) from None

    def _given_up_on(self, err: OSError) -> RunError:
        """A run's request or answer lost (``err``): the worker may still be in the run
        (stopped, slow), which :meth:`close` minds."""
        self._given_up = True
        return RunError(f"worker {self.where}: program failed: {err}", self.name)

    def program_answer(
        self, asked: Asked, answer_s: float | None = None, spin_s: float = 0.0
    ) -> Answer:  # fmt: skip
        """The answer to :meth:`start_program`'s request ``asked``, as :meth:`run_program`
        returns it."""
        spin = (lambda conn: await_bytes(conn, spin_s)) if spin_s > 0 else None
        try:
            answer = self._runs.answer(asked, answer_s, before_answer=spin)
        except OSError as err:
            raise self._given_up_on(err) from None
        try:
            return read_status_answer(answer)
        except WorkerSaid as err:
            peer = re.search(r"LinkError from (\S+):", str(err))  # a late value: its maker's
            blame = peer.group(1) if peer else self.name
            raise RunError(f"worker {self.where}: program failed: {err}", blame) from None

    def _tell(self, message: dict, what: str, array: np.ndarray | None = None) -> None:
        try:
            self._teller.tell(self.address[0], self.data_port, message, array)
        except OSError as err:
            raise RunError(f"worker {self.where}: {what} failed: {err}", self.name) from None

    def download(self, value: RemoteValue) -> np.ndarray:
        """A held tensor's bytes, here, from the worker's data port (not over RPC, whose
        session a running program holds): answered once the value exists there."""
        try:
            return self._puller.fetch(self.address[0], self.data_port, value.name)
        except OSError as err:
            raise RunError(f"worker {self.where}: download of {value.name} failed: {err}",
                           self.name) from None  # fmt: skip

    def sync(self) -> None:
        """Nothing: every call returns when the worker is done."""

    def fingerprint(self) -> dict[str, Any]:
        """The worker's device as the profile database keys it."""
        kind = "cuda" if self.spec.kind is DeviceKind.CUDA else "cpu"
        fn = self.session.get_function("tvm_hetero.fingerprint")
        data = json.loads(self._rpc("fingerprint", lambda: fn(kind, self.spec.index, 0)))
        return {**data, "host": self.spec.host}

    def close(self) -> None:
        """Stop the client thread and end the session (the worker's session process exits).

        A worker still in a call (a long unit on a slow device, a run given up on, a worker
        stopped or unreachable) would block the release of every handle of its session (each is
        a call to the worker): those are released once that call returns, in a daemon thread,
        and never while it does not. Held for the rest of the process instead, a worker that
        was only slow stayed busy with the old session: an ``optimize`` search on the emulated
        ring stopped a strategy over budget during a run of MT-DNN on devices of 0.6 core, and
        two minutes later could not connect to those workers again ("no free worker").
        """
        self._teller.close()
        self._puller.close()
        self._runs.close()  # a run still awaited ends now
        handles = (self.session, self._remote, self.device)
        self.session, self._remote, self.device = None, {}, None
        address = (self.address[0], self.data_port)
        if not self._thread.close(timeout_s=1.0):
            _release_after(self._thread, handles)
        elif self._given_up or not _answers(address, CLOSE_PING_S):
            # the worker may be in a run still (stopped, slow): ending the session now would
            # wait for it, holding the GIL (TVM RPC's shutdown). A run given up on says so;
            # the ping finds the rest: a worker stopped after its last run ended leaves no
            # mark, and Executor.close hung on one (tests/runtime under load, 9451462)
            threading.Thread(
                target=_release_when_answering, args=(address, handles), daemon=True,
                name="closing-session",
            ).start()  # fmt: skip


def check_protocol(session: Any, where: str, name: str) -> None:
    """Refuse a worker that speaks another protocol than this client (an older tvm-hetero:
    its data port would not answer a run, and the run would wait out its timeout)."""
    try:
        theirs = int(session.get_function(PREFIX + "protocol")())
    except (AttributeError, RuntimeError):
        theirs = 1
    if theirs != PROTOCOL:
        raise RunError(
            f"worker {where} speaks protocol {theirs}, this client {PROTOCOL}: restart it "
            "with this tvm-hetero (tvm-hetero worker, or cluster down and up)", name,
        )  # fmt: skip


def _array(value: Any) -> np.ndarray:
    """A tensor or array of this process as numpy: a CPU tensor's own memory, no copy (sent at
    once, while the tensor lives; the copy cost zoo:lstm's run on a loopback worker some tens
    of microseconds of about three hundred)."""
    if not isinstance(value, tvm.runtime.Tensor):
        return np.asarray(value)
    if value.device.dlpack_device_type() == CPU_DEVICE:
        with contextlib.suppress(BufferError, TypeError, RuntimeError):  # a type numpy lacks
            return np.from_dlpack(value)
    return value.numpy()


def _release_after(jobs: JobThread, handles: object) -> None:
    """Keep ``handles`` unreleased until ``jobs`` has ended, then let them go (a daemon
    thread's frame: one that never ends is never torn down, not even at exit)."""
    threading.Thread(
        target=_hold_until, args=(jobs, handles), name="closing-session", daemon=True
    ).start()


def _hold_until(jobs: JobThread, handles: object) -> None:
    jobs.join()


CLOSE_PING_S = 1.0
"""How long closing a session waits for the worker's data port to answer before it lets the
session go from a thread of its own, once the worker answers."""


def _answers(address: tuple[str, int], within_s: float | None) -> bool:
    """Whether the worker's data port answers a run of nothing within ``within_s`` (None: at
    all, waited for; a dead worker does not)."""
    try:
        with socket.create_connection(address, timeout=within_s) as sock:
            sock.settimeout(within_s)
            send_command(sock, {RUN: [0, 0, 0.0, []]})
            recv_frame(sock)
        return True
    except OSError:
        return False


def _release_when_answering(address: tuple[str, int], handles: object) -> None:
    """Let ``handles`` go once the worker's data port answers (at once for a dead worker)."""
    _answers(address, None)


def error_line(err: BaseException) -> str:
    """The line of ``err`` that says what went wrong: the first naming an error, else the
    first (an RPC error's heading, which only says that the worker raised, is not one)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.endswith("Error caught from RPC call:")]
    return next((ln for ln in lines if "Error" in ln), lines[0] if lines else type(err).__name__)
