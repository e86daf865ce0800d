"""The worker of an edge cluster: a TVM RPC server with tvm-hetero's functions registered.

Start it with ``tvm-hetero worker --port P`` (or ``python -m tvm_hetero.runtime.rpc_worker``). It
needs only the TVM runtime: the client compiles, uploads each worker's library and drives it.

It speaks the plain ``tvm.rpc`` protocol (any ``tvm.rpc.connect`` client works; TVM RPC has no
authentication: listen on loopback or a private network only). TVM's server forks one process
per client session; in that process the functions below keep the session's state: the device's
VM over the uploaded library, the values it holds by name, and a :class:`TensorServer` from which
other workers pull the values they consume and into which they push what their units made for
it (see :mod:`.tensor_link`).

- ``tvm_hetero.fingerprint(kind, index, threads)``: the device as the profile database keys it.
- ``tvm_hetero.worker.data_port()``: the port of the session's data server (started then), where
  the client uploads the device's library (an ``upload`` command, :mod:`.uploads`: plain TCP,
  and a library the worker kept from an earlier session, by its SHA-256, is not sent again).
- ``tvm_hetero.worker.load(file, spec_json)``: load an uploaded library on the device of the spec
  (pinned to its cores, with its threads); returns the data port.
- ``tvm_hetero.worker.load_program(ops, native, me)``, then a ``run`` command on the data port
  (``[run, microbatches, wait_s, returns]``): keep this worker's program, then run it for every
  microbatch of a run (one message a run: the client's inputs go ahead of the command on the
  same connection; no TVM RPC round trip; the outputs it takes come back with the answer up to
  ``RETURN_BYTES`` each, larger ones from the data port, whose server answers a name once it
  is held).
  What a program sends a peer goes on a program link, read by the peer's program thread itself
  (:mod:`.program_links`); one link between two workers carries values both ways.
- ``tvm_hetero.worker.call(function, out, *names)``: run a unit on held values, hold its result;
  returns ``[arity, waited_s, item_arities]`` as JSON (``waited_s``: how long the unit waited
  here for inputs still arriving, which the client's timeline does not count as busy); a tuple's
  items are held too, as ``out.I``.
- ``tvm_hetero.worker.call_push(function, out, pushes, *names)``: ``call``, then each of
  ``pushes`` (JSON ``[[index, host, port, name], ...]``: item ``index`` of the result, ``-1`` for
  all of it) sent, from a thread of the session, to the worker whose data port is ``host:port``,
  which holds it as ``name``: a consumer of the unit's result gets it as soon as the unit ends.
- ``tvm_hetero.worker.item(src, index, out)``: hold element ``index`` of a held tuple.
- Names are ``RUN/NAME``: the first name of a newer run makes the values held so far spare
  buffers (received into by name when shape and type match), so nothing piles up.
- ``tvm_hetero.worker.fetch(host, port, src, out)``: the same pull over RPC, waited for
  (``benchmarks/cluster/shaped_links.py`` times it).
- a ``pull`` command on the data port (not RPC: the RPC loop may be busy computing): ask another
  worker for a value at once (requests to one peer are pipelined, see
  :class:`~.tensor_link.TensorFetcher`); a unit that reads it waits for it. A ``put`` command
  there brings an input from the client, or a value another worker pushes, the same way.
- ``tvm_hetero.worker.onnxruntime_open(file, spec_json)``: ONNX Runtime on an uploaded ONNX
  file, on the device of the spec (the peer an ``optimize`` search times beside its candidates
  on a cluster's device; needs ``onnxruntime`` on the worker); an ``onnxruntime`` command on
  the data port runs it on the inputs that follow the command and answers with its outputs, as
  a run of our program is answered, so the client times both alike.
- ``tvm_hetero.worker.fill(name, nbytes)`` / ``probe(host, port, src, repeat, drain, idle_s)``:
  a link probe's payload, and pulls of it from another worker timed here (``tvm-hetero cluster
  probe``; the sync traces of :mod:`tvm_hetero.strategies.flexpie.traces`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import functools
import json
import math
import os
import queue
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

FINGERPRINT_FUNC = "tvm_hetero.fingerprint"
PREFIX = "tvm_hetero.worker."
_BIND = {"host": "127.0.0.1"}  # the address the server listens on (data port: the same)
INLINE_PUSH_BYTES = 256 * 2**10
"""A program's value up to this size is pushed from the program's own thread."""
ARRIVAL_TIMEOUT_S = 120.0
"""How long a unit waits for a pulled input before it fails (the client's own timeout, ``run
--timeout``, is usually shorter and names the worker first)."""


UPLOAD_STALL_S = 60.0
"""An upload whose bytes stop arriving this long fails (its session goes on)."""
CACHE_BYTES = 4 * 10**9
"""Uploaded libraries a worker keeps for later sessions by default (``--cache-gb``)."""
_STORE: list[Any] = []  # the worker's LibraryStore, made by serve (its sessions share it)


PROTOCOL = 6
"""What the client and the worker speak (2: runs on the data port; 3: ONNX Runtime's runs
there too; 4: programs run natively, ``load_program(ops, native)``; 5: program links both ways,
``load_program(ops, native, me)``; 6: a program's answer says when, on the worker's clock, the
program started); a client refuses a worker of another, which would not understand it (restart
the worker)."""
RUN = "run"
"""The data port's command that runs the program (:meth:`_Session._run_command`)."""
NEXT_RUN_SPIN_S = 500e-6
"""How long a worker with cores of its own (``program_links.spin_seconds``) spins for the
client's next run after it answered one, before it sleeps on the connection: the client's
own work between two runs takes longer than a program link's spin (``SPIN_S``); with the
client's spin for the answer (``program_runner.ANSWER_SPIN_S``), 500 us spins took two fifths
off a small run on one worker (the chain of benchmarks/runtime/programs.py --remote, the
spins patched on and off; a spin in Python before, 200 us took less off, 1 ms no more)."""
ONNXRUNTIME = "onnxruntime"
"""The data port's command that runs ONNX Runtime (:meth:`_Session._onnxruntime_command`)."""
RETURN_BYTES = 2**20
"""A tensor the client takes at the end of a run comes back with the program's answer up to
this size; a larger one is downloaded through the data port, as every value was."""


EVENT_FIELDS = 6
"""A step run, in a program's answer: step, microbatch, start, end, waited, arity."""


ANSWER_HEAD = struct.Struct("<IId")
"""A program answer's head: the bytes of its JSON ``back``, its events, and when the program
started on the worker's clock (``time.perf_counter``: ``CLOCK_MONOTONIC``, which every process
of one machine shares; NaN where no program ran)."""


class Answer(NamedTuple):
    """A program's answer, read: the events (a ``float64`` array of rows of
    :data:`EVENT_FIELDS`, times from ``started``), the tensors by ``(microbatch, name)``, and
    when the program started on the worker's clock."""

    events: Any
    tensors: dict[tuple[int, str], Any]
    started: float


def program_answer(
    events: Any, back: list[list], blobs: list[Any], started: float = math.nan
) -> bytes:
    """A program's answer: :data:`ANSWER_HEAD` (the bytes of the JSON ``back``: ``[microbatch,
    name, shape, dtype]`` of each tensor returned, the count of events, ``started``), ``back``,
    the events as rows of :data:`EVENT_FIELDS` little-endian doubles (``events``: such rows,
    a list or an array), then the tensors' bytes (``blobs``: C-contiguous arrays or bytes,
    copied once, into the answer). The events went as JSON at first: formatting and parsing
    their floats took some 150 us a run of 32 steps, more than the rest of the answer."""
    import numpy as np

    table = np.asarray(events, "<f8").reshape(-1, EVENT_FIELDS)
    head = json.dumps(back).encode()
    return (
        ANSWER_HEAD.pack(len(head), len(table), started) + head + table.tobytes() + b"".join(blobs)
    )


def read_program_answer(answer: bytes | memoryview) -> Answer:
    """:func:`program_answer`'s events, as a ``float64`` array of rows of
    :data:`EVENT_FIELDS` (step, microbatch and arity whole numbers), its tensors by
    ``(microbatch, name)`` as numpy arrays of their own, and when the program started. The rows
    stay an array: made into lists, then events, as each answer came, they cost the client
    some 2 us a step, which a chain of remote units paid a crossing (the timeline makes its
    events when it is read)."""
    import numpy as np

    size, count, started = ANSWER_HEAD.unpack_from(answer)
    at = ANSWER_HEAD.size
    back = json.loads(bytes(answer[at : at + size]))
    at += size
    events = np.frombuffer(answer, "<f8", count * EVENT_FIELDS, at).reshape(-1, EVENT_FIELDS)
    at, arrays = at + events.nbytes, {}
    for mb, name, shape, dtype in back:
        count = math.prod(shape)
        array = np.frombuffer(answer, dtype, count, at).reshape(shape).copy()
        arrays[mb, name] = array
        at += array.nbytes
    return Answer(events.copy(), arrays, started)


class WorkerSaid(RuntimeError):
    """A worker's answer of a failed command: the line it said (a status byte of 1)."""


def read_status_answer(answer: bytes) -> Answer:
    """A data-port command's answer (``run``, ``onnxruntime``): a status byte, then
    :func:`read_program_answer`'s events and tensors (status 0), or what the worker said
    (:class:`WorkerSaid`)."""
    if answer[:1] != b"\0":
        raise WorkerSaid(answer[1:].decode(errors="replace"))
    return read_program_answer(memoryview(answer)[1:])


def _address(value: Any) -> tuple[str, int]:
    """A link command's ``back`` as ``(host, port)``; ``ValueError`` for anything but a host
    name and a port number (the data port then closes that connection, and serves on)."""
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise ValueError(f"a link's back address is [host, port], not {value!r}")
    port = value[1]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"a link's back port is 1-65535, not {port!r}")
    return value[0], port


def _arity(value: Any) -> int:
    """-1 for a tensor, the element count for a tuple."""
    import tvm

    return -1 if isinstance(value, tvm.runtime.Tensor) else len(value)


class _Session:
    """What one client session holds (one per forked session process)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.spare: dict[str, Any] = {}  # the last run's values: buffers to receive into
        self.failed: dict[str, str] = {}  # pulls that failed, by the name they were to take
        self.arrived = threading.Condition()  # guards values, spare, failed and run
        self.run = 0
        self.vm: Any = None
        self.device: Any = None
        self.gpu = False
        self.server: Any = None
        self.fetcher: Any = None
        self.name = "a worker"
        self.pushes: queue.SimpleQueue | None = None  # sends, made in order by the push thread
        self.program: list[dict] = []  # this worker's steps of a run (issue 60)
        self.functions: dict[str, Any] = {}
        self.inlinks: Any = None  # program links: what peers' programs push to this one
        self.outlinks: Any = None
        self.spin_s = 0.0
        self.native: Any = None  # the program run natively (native_remote), if it is
        self.received: dict[str, tuple] = {}  # tensors made to receive into (_buffer)
        self.onnx: Any = None  # ONNX Runtime beside us on this device (onnxruntime_open)
        self.spec: Any = None  # the device loaded (load)
        self.pooled = threading.local()  # whether this thread's TVM pool is the device's

    def load(self, file_name: str, spec_json: str) -> int:
        import tvm
        from tvm.runtime.vm import VirtualMachine

        from tvm_hetero.devices.spec import DeviceKind, DeviceSpec
        from tvm_hetero.runtime.device import runtime_device
        from tvm_hetero.runtime.worker import configure_threads

        spec = DeviceSpec.from_dict(json.loads(spec_json))
        self.name, self.spec = spec.name, spec
        path = _work_file(file_name)
        self.device = runtime_device(spec)
        self.gpu = spec.kind is DeviceKind.CUDA
        if spec.kind is DeviceKind.CPU:
            configure_threads(spec)
        self.vm = VirtualMachine(tvm.runtime.load_module(path), self.device)
        return self.data_port()

    def onnxruntime_open(self, file_name: str, spec_json: str) -> int:
        """Open ONNX Runtime on the uploaded ONNX file on the spec's cores with its threads;
        the number of inputs it takes."""
        from tvm_hetero.devices.spec import DeviceSpec
        from tvm_hetero.runtime.onnx_session import OnnxSession

        spec = DeviceSpec.from_dict(json.loads(spec_json))
        self.name = spec.name
        self.onnx = OnnxSession(_work_file(file_name), spec.threads or 0, spec.cores or ())
        return len(self.onnx.declared)

    def _onnxruntime_command(self, inputs: list[Any]) -> bytes:
        """One run of the open ONNX Runtime session on ``inputs`` for the data port's
        ``onnxruntime`` command: its outputs as a program's answer returns tensors (named by
        their index)."""
        if self.onnx is None:
            raise ValueError("no ONNX Runtime session is open (onnxruntime_open first)")
        import numpy as np

        outputs = [np.ascontiguousarray(o) for o in self.onnx.run(inputs)]
        back = [[0, str(i), list(o.shape), str(o.dtype)] for i, o in enumerate(outputs)]
        return program_answer([], back, outputs)

    def data_port(self) -> int:
        """The port of this session's tensor server (started on first use)."""
        from tvm_hetero.runtime.program_links import Inlinks
        from tvm_hetero.runtime.tensor_link import TensorFetcher, TensorServer

        if self.server is None:
            self.inlinks = Inlinks()
            self.server = TensorServer(self._host_view, _BIND["host"], self._command)
            self.fetcher = TensorFetcher()
            self.puller = TensorFetcher()
        return int(self.server.address[1])

    def fill(self, name: str, nbytes: int) -> int:
        """Hold ``nbytes`` of ones as ``name`` (a link probe's payload); the data port."""
        import numpy as np
        import tvm

        self.hold(name, tvm.runtime.tensor(np.ones(nbytes, "uint8")))
        return self.data_port()

    def probe(
        self, host: str, port: int, src: str, repeat: int, drain: int = 0, idle_s: float = 0.0
    ) -> str:
        """Pull ``src`` from the worker at ``host:port`` once untimed, ``drain`` more times
        untimed back to back (a busy link), then ``repeat`` times, each after the link sat idle
        ``idle_s``; the seconds of each timed pull as JSON (timed here, so the client's link
        does not count)."""
        import numpy as np

        self.data_port()
        out = None

        def reuse(shape: tuple[int, ...], dtype: str) -> Any:
            nonlocal out
            if out is None or out.shape != shape:
                out = np.empty(shape, dtype)
            return out

        seconds = []
        for i in range(1 + drain + repeat):
            timed = i > drain
            if timed and idle_s > 0:
                time.sleep(idle_s)
            start = time.perf_counter()
            self.fetcher.fetch(host, port, src, reuse)
            if timed:
                seconds.append(time.perf_counter() - start)
        return json.dumps(seconds)

    def _roll(self, name: str) -> bool:
        """Under the lock: start run ``RUN`` of a ``RUN/NAME`` if it is newer (what is held
        becomes spare, by ``NAME``); False for a name of an older run (a late arrival)."""
        head, _, base = name.partition("/")
        run = int(head) if base and head.isdigit() else 0
        if run > self.run:
            self.spare = {k.partition("/")[2] or k: v for k, v in self.values.items()}
            self.values, self.failed, self.run = {}, {}, run
        return run >= self.run

    def value(
        self, name: str, timeout_s: float = ARRIVAL_TIMEOUT_S, maker: str | None = None
    ) -> Any:  # fmt: skip
        """A held value; one still being pulled or pushed is waited for (``timeout_s``; one
        that a remote worker ``maker`` sends and does not is that worker's failure)."""
        with self.arrived:
            self._roll(name)
            if not self.arrived.wait_for(
                lambda: name in self.values or name in self.failed, timeout_s
            ):
                raise late_error(name, timeout_s, maker)
            if name in self.failed:
                raise ConnectionError(self.failed.pop(name))
            return self.values[name]

    def program_value(self, name: str, timeout_s: float, maker: str | None) -> Any:
        """:meth:`value`, for the program thread: it reads its program links itself while it
        waits (:mod:`~tvm_hetero.runtime.program_links`), polling them first for
        ``spin_s``, then sleeping on them and on a wake-up for values that other threads
        hold (the client's inputs, pulls)."""
        links = self.inlinks
        now = time.perf_counter()
        deadline, spin_end = now + timeout_s, now + self.spin_s
        while True:
            with self.arrived:
                self._roll(name)
                if name in self.values:
                    return self.values[name]
                if name in self.failed:
                    raise ConnectionError(self.failed.pop(name))
                links.blocked = sleep = now >= spin_end
            if now >= deadline:
                raise late_error(name, timeout_s, maker)
            wait = min(deadline - now, 1.0) if sleep else 0.0
            got = links.receive(wait, self._buffer, deadline - now)
            links.blocked = False
            for arrived, value in got:
                self.hold(arrived, value.copyto(self.device) if self.gpu else value)
            now = time.perf_counter()

    def hold(self, name: str, value: Any) -> None:
        with self.arrived:
            if self._roll(name):
                self.values[name] = value
                self.arrived.notify_all()
                if self.inlinks is not None and self.inlinks.blocked:
                    self.inlinks.wake()

    def call(self, function: str, out: str, *names: str) -> str:
        start = time.perf_counter()
        args = [self.value(n) for n in names]
        waited = time.perf_counter() - start
        result = self.vm.module[function](*args)
        if self.gpu:  # the timeline waits for the kernels
            self.device.sync()
        self.hold(out, result)
        arity = _arity(result)
        items = [result[i] for i in range(max(arity, 0))]
        for i, item in enumerate(items):  # the items too: the client names them without a call
            self.hold(f"{out}.{i}", item)
        return json.dumps([arity, waited, [_arity(item) for item in items]])

    def call_push(self, function: str, out: str, pushes: str, *names: str) -> str:
        """:meth:`call`, then the result (or its items) sent on to the workers that consume it,
        from the session's push thread: pulled instead, a piece reached its consumer 6.6 ms
        (median) after its unit ended, 3.4 of them before the client's pull command arrived
        and 0.8 more before the request reached this worker (MobileNet in rows on an emulated
        ring of 4)."""
        said = self.call(function, out, *names)
        self._pusher()
        for index, host, port, name in json.loads(pushes):
            value = self._host_view(out if index < 0 else f"{out}.{index}")
            self.pushes.put(functools.partial(self._deliver, host, int(port), name, value))
        return said

    def load_program(self, ops: str, native: bool = True, me: str = "") -> str:
        """Keep this worker's program (JSON: its units and items in order, each with the
        peers its value is pushed to, :func:`tvm_hetero.runtime.program_runner.remote_ops`),
        run natively (:mod:`~tvm_hetero.runtime.native_remote`) where ``native`` and it can
        be; "" when it is, else why not. ``me``: this worker's data port as its peers are told
        it (JSON ``[host, port]``), which makes its program links carry values both ways
        (:mod:`~tvm_hetero.runtime.program_links`); "" for links one way."""
        from tvm_hetero.runtime.native_remote import NativeProgram, NotNative
        from tvm_hetero.runtime.program_links import Outlinks, spin_seconds

        self.program = json.loads(ops)
        self.functions = {op["function"]: self.vm.module[op["function"]]
                          for op in self.program if op["op"] == "unit"}  # fmt: skip
        self._pusher()
        if self.native is not None:
            self.native.close()
            self.native = None
        if self.outlinks is not None:
            self.outlinks.close()
        here = _address(json.loads(me)) if me else None
        self.outlinks = Outlinks(self.name, inlinks=self.inlinks, me=here)
        for host, port, _, linked in (push for op in self.program for push in op["pushes"]):
            if linked:
                self.outlinks.open(host, int(port))
        self.spin_s = spin_seconds()
        if not native:
            return "not asked for"
        try:
            self.native = NativeProgram(
                self, self.program, self.outlinks, self.inlinks, self.spin_s
            )  # fmt: skip
        except NotNative as err:
            return str(err)
        return ""

    def run_program(self, run: int, microbatches: int, wait_s: float, returns: list) -> bytes:
        """Run the program for each microbatch of run ``run`` in turn (values named
        ``RUN/MICROBATCH:NAME``), waiting at most ``wait_s`` for each input that another
        worker or the client sends. The answer (:func:`program_answer`): per step run,
        ``[step, microbatch, start, end, waited, arity]`` with seconds from this call's start,
        and each microbatch's tensors named in ``returns`` (the values the client takes when
        the run ends) up to :data:`RETURN_BYTES` each, which the client then need not
        download (a download was a round trip through the data port after the run)."""
        started, events = self._run_program(run, microbatches, wait_s)
        back, blobs = [], []
        with self.arrived:
            held = [(mb, name, self.values.get(f"{run}/{mb}:{name}"))
                    for mb in range(microbatches) for name in returns]  # fmt: skip
        for mb, name, value in held:
            if value is not None and _arity(value) < 0:
                view = self._view(value)
                if view.nbytes <= RETURN_BYTES:
                    back.append([mb, name, list(view.shape), str(view.dtype)])
                    blobs.append(view)
        return program_answer(events, back, blobs, started)

    def _run_command(self, run: int, microbatches: int, wait_s: float, returns: list) -> bytes:
        """:meth:`run_program` for the data port's ``run`` command (this thread's TVM pool
        set to the device's cores and threads first, once: TVM keeps a pool per calling
        thread)."""
        if not getattr(self.pooled, "done", False) and self.spec is not None:
            from tvm_hetero.devices.spec import DeviceKind
            from tvm_hetero.runtime.worker import configure_threads

            if self.spec.kind is DeviceKind.CPU:
                configure_threads(self.spec)
            self.pooled.done = True
        return self.run_program(run, microbatches, wait_s, returns)

    def _run_program(self, run: int, microbatches: int, wait_s: float) -> tuple[float, Any]:
        """:meth:`run_program`'s steps: when they started (``time.perf_counter``) and their
        events (rows, :data:`EVENT_FIELDS` each, times from then)."""
        if self.native is not None:
            return self.native.run(run, microbatches, wait_s)
        t0, events = time.perf_counter(), []
        for mb in range(microbatches):
            prefix = f"{run}/{mb}:"
            for op in self.program:
                start = time.perf_counter()
                if op["op"] == "unit":
                    makers = op["from"]
                    args = [
                        self.program_value(prefix + n, wait_s, makers.get(n)) for n in op["inputs"]
                    ]
                    waited = time.perf_counter() - start
                    result = self.functions[op["function"]](*args)
                    if self.gpu:  # the timeline waits for the kernels
                        self.device.sync()
                else:
                    waited = 0.0
                    result = self.program_value(prefix + op["src"], wait_s, None)[op["index"]]
                self.hold(prefix + op["out"], result)
                if op["pushes"]:
                    self._push(self._view(result), prefix, op["pushes"])
                end = time.perf_counter()
                events.append([op["step"], mb, start - t0, end - t0, waited, _arity(result)])
        return t0, events

    def _push(self, view: Any, prefix: str, pushes: list) -> None:
        """Send ``view`` to each of ``pushes`` (``[host, port, name, linked]``): on the program
        link where the peer's program reads it, else to its data port (an output the client
        downloads there); a small tensor at once, from this thread (it fits the socket's
        buffer, and the push thread's wake-up cost a crossing more than the send), a large one
        from the push thread, so the program goes on computing while it leaves."""
        for host, port, name, linked in pushes:
            how = self._send_link if linked else self._deliver
            send = functools.partial(how, host, int(port), prefix + name, view)
            if view.nbytes > INLINE_PUSH_BYTES:
                self.pushes.put(send)
            else:
                send()

    def _send_link(self, host: str, port: int, name: str, array: Any) -> None:
        """``array`` to the program of the worker at ``host:port``; one that cannot be reached
        is dropped (its consumer's own wait fails, blaming this worker)."""
        with contextlib.suppress(OSError):
            self.outlinks.send(host, port, name, array)

    def _pusher(self) -> None:
        """Start the push thread (once)."""
        if self.pushes is None:
            self.data_port()
            self.pushes = queue.SimpleQueue()
            threading.Thread(target=self._push_loop, name="tensor-push", daemon=True).start()

    def _push_loop(self) -> None:
        """Send what :meth:`call_push` queued; a consumer that cannot be reached fails its own
        call (its worker is gone) or, where the link alone broke, waits out its arrival timeout."""
        while True:
            self.pushes.get()()

    def _deliver(self, host: str, port: int, name: str, array: Any) -> None:
        """Push ``array`` to the data port at ``host:port`` as ``name``; one that cannot be
        reached is dropped (its consumer's own wait fails, blaming this worker)."""
        with contextlib.suppress(OSError):
            self.fetcher.tell(host, port, {"put": name, "from": self.name}, array)

    def item(self, src: str, index: int, out: str) -> int:
        item = self.value(src)[index]
        self.hold(out, item)
        return _arity(item)

    def _host_view(self, name: str) -> Any:
        """A held tensor as numpy, waited for while a program has not made it yet."""
        try:
            return self._view(self.value(name))
        except TimeoutError:
            raise KeyError(name) from None

    def _view(self, value: Any) -> Any:
        """A tensor as numpy: its own memory on a CPU (no copy), a copy from a GPU."""
        import numpy as np

        return value.numpy() if self.gpu else np.from_dlpack(value)

    def _command(self, message: dict, conn: socket.socket) -> bool:
        """A command from the client on the data port: ``{"pull": [host, port, src, out,
        peer]}`` asks worker ``peer`` for ``src`` at once (the data server's thread goes back to
        the next command), and it arrives as ``out``; ``{"put": out}`` is followed by the array
        itself, an input from the client (not over RPC, whose loop may be computing) or, with
        ``"from"``, a value that worker pushes. A failure is kept for the unit that reads
        ``out``. ``{"link": peer}``: the connection is a program link, read by the program
        thread from now on (True: taken over). ``{"upload": file, ...}``: a library
        (:func:`~.uploads.receive`). ``{"run": [run, microbatches, wait_s, returns]}``: a run
        of the program in this thread (:meth:`_run_command`), answered on ``conn``: the
        client's inputs for it came before it on the same connection, so they are held when it
        starts, and the run is one message each way. ``{"onnxruntime": count}``, followed by
        ``count`` arrays: ONNX Runtime run on them (:meth:`_onnxruntime_command`), answered
        the same way."""
        from tvm_hetero.runtime.program_links import LINK, LINKED
        from tvm_hetero.runtime.tensor_link import recv_array, send_frame
        from tvm_hetero.runtime.uploads import UPLOAD, receive

        if LINK in message:
            back = message.get("back")
            peer = None if back is None else _address(back)  # ValueError: the link refused
            self.inlinks.adopt(conn, peer)
            if peer is not None:  # the link carries this program's values to it too: the
                conn.sendall(LINKED)  # dialer's load returns once a later one here finds it
            return True
        if UPLOAD in message:
            receive(message, conn, _work_file, _STORE[0] if _STORE else None, UPLOAD_STALL_S)
            return False
        if RUN in message:
            send_frame(conn, _status(lambda: self._run_command(*message[RUN])))
            if self.spin_s > 0:  # the client's next run comes on this connection
                from tvm_hetero.runtime.native_remote import await_bytes

                await_bytes(conn, NEXT_RUN_SPIN_S)
            return False
        if ONNXRUNTIME in message:
            inputs = [recv_array(conn) for _ in range(int(message[ONNXRUNTIME]))]
            send_frame(conn, _status(lambda: self._onnxruntime_command(inputs)))
            return False
        if "put" in message:
            allocate, done = self._receiver(message["put"], message.get("from", "the client"))
            try:
                recv_array(conn, allocate)
            except Exception as err:
                done(None, err)
                raise  # the connection is out of step: the server drops it
            done(None, None)
            return False
        host, port, src, out, peer = message["pull"]
        self._pull(host, int(port), src, out, peer)
        return False

    def fetch(self, host: str, port: int, src: str, out: str) -> None:
        """The same pull, waited for (over RPC: a benchmark times it)."""
        self.data_port()
        self._pull(host, port, src, out, f"{host}:{port}")
        self.value(out)

    def _pull(self, host: str, port: int, src: str, out: str, peer: str) -> None:
        """Ask ``peer`` at ``host:port`` for ``src`` now; it arrives as ``out``."""
        allocate, done = self._receiver(out, peer)
        self.puller.fetch_later(host, port, src, allocate, done)

    def _receiver(self, out: str, peer: str) -> tuple[Callable, Callable]:
        """Where a tensor arriving as ``out`` goes (``allocate``, :meth:`_buffer`) and what
        its arrival or failure does (``done``)."""
        made = []

        def allocate(shape: tuple[int, ...], dtype: str) -> Any:  # straight into TVM's memory
            tensor, view = self._buffer(out, shape, dtype)
            made.append(tensor)
            return view

        def done(_: Any, err: BaseException | None) -> None:
            if err is None:
                self.hold(out, made[0].copyto(self.device) if self.gpu else made[0])
                return
            with self.arrived:  # reported to the reader of ``out``
                if self._roll(out):
                    self.failed[out] = f"LinkError from {peer}: {err}"
                    self.arrived.notify_all()

        return allocate, done

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: str) -> tuple[Any, Any]:
        """A CPU tensor to receive value ``name`` into, and a numpy view of it: the last run's
        value of that name where shape and type match (the names restart every run, and a
        run's values are consumed before the next run starts; fresh memory would cost a
        page fault per page). The tensor made for a name is kept with its view, shape and
        type: asking a tensor for them through TVM FFI took a program 10 us a value."""
        import numpy as np
        import tvm

        base = name.partition("/")[2] or name
        with self.arrived:
            self._roll(name)
            old = self.spare.get(base)
        made = self.received.get(base)
        if made is not None and made[0] is old and made[2] == shape and made[3] == dtype:
            return old, made[1]
        tensor = tvm.runtime.empty(shape, dtype, tvm.cpu(0))
        view = np.from_dlpack(tensor)
        self.received[base] = (tensor, view, shape, dtype)
        return tensor, view


def _status(answer: Callable[[], bytes]) -> bytes:
    """A data port command's answer after a zero byte, or a one byte and its error (the
    client's run fails, naming it; the worker serves on)."""
    try:
        return b"\0" + answer()
    except Exception as err:
        return b"\1" + f"{type(err).__name__}: {err}".encode()


def late_error(name: str, timeout_s: float, maker: str | None) -> Exception:
    """The error of value ``name`` not there within ``timeout_s``; one that a remote worker
    ``maker`` sends blames that worker (the client reads "LinkError from NAME:" as the blame)."""
    if maker:
        return ConnectionError(f"LinkError from {maker}: {name!r} did not arrive within "
                               f"{timeout_s:g} s")  # fmt: skip
    return TimeoutError(f"value {name!r} did not arrive in {timeout_s:g} s")


def register() -> None:
    """Register tvm-hetero's remote functions in this process (the forks inherit them)."""
    import tvm

    from tvm_hetero.runtime.device import local_fingerprint

    @tvm.register_global_func(FINGERPRINT_FUNC, override=True)
    def _fingerprint(kind: str, index: int, threads: int) -> str:
        return json.dumps(local_fingerprint(kind, index, threads or None).to_dict())

    session = _Session()
    functions = {
        "data_port": session.data_port,
        "load": session.load,
        "call": session.call,
        "call_push": session.call_push,
        "item": session.item,
        "fetch": session.fetch,
        "fill": session.fill,
        "load_program": session.load_program,
        "probe": session.probe,
        "protocol": lambda: PROTOCOL,
        "onnxruntime_open": session.onnxruntime_open,
    }
    for name, fn in functions.items():
        tvm.register_global_func(PREFIX + name, fn, override=True)


def serve(
    host: str, port: int, port_end: int, key: str = "", tracker: tuple[str, int] | None = None,
    cache: Path | None = None, cache_bytes: int = CACHE_BYTES,
) -> None:  # fmt: skip
    """Bind the first free port in ``[port, port_end)`` and serve forever (one fork per session);
    with ``tracker``, report to TVM's RPC tracker under ``key``. Uploaded libraries are kept in
    folder ``cache`` up to ``cache_bytes`` for later sessions (default: a temporary folder removed
    when the worker exits). The worker works in that folder (or the system's temporary one),
    not in the one it was started in, which may be deleted under it."""
    from tvm_hetero.runtime.without_torch import import_tvm_without_torch

    import_tvm_without_torch()  # a worker never holds a torch tensor: it starts 3-4 s sooner
    from tvm.rpc import server as rpc_server

    from tvm_hetero.runtime.uploads import LibraryStore

    _BIND["host"] = host
    owned = None
    if cache is None and cache_bytes > 0:
        cache = owned = Path(tempfile.mkdtemp(prefix="tvm-hetero-worker-"))
        owner = os.getpid()
        atexit.register(lambda: os.getpid() == owner and shutil.rmtree(owned, True))
    _ended_by_sigterm(owned)
    if cache is not None:
        cache = Path(cache).resolve()  # it works in it: a relative path would move with it
        _STORE[:] = [LibraryStore(cache, cache_bytes)]
    os.chdir(cache if cache is not None else tempfile.gettempdir())  # a folder of its own
    register()
    # TVM's loop forks a process per session and raises, ending the worker, when one dies
    # abnormally; a killed worker left its session serving. The pinned wheel's two functions
    # are wrapped so a session's death ends that session only, and the worker's ends all.
    rpc_server._serving = _surviving(rpc_server._serving)
    rpc_server._serve_loop = _dying_with(os.getpid(), rpc_server._serve_loop)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for candidate in range(port, port_end):
        try:
            sock.bind((host, candidate))
            break
        except OSError as err:
            if err.errno != errno.EADDRINUSE:
                raise
    else:
        raise ConnectionError(f"no free port in [{port}, {port_end}) on {host}")
    sock.listen(1)
    print(f"tvm-hetero worker listening on {host}:{candidate}", flush=True)
    rpc_server._listen_loop(sock, candidate, key, tracker, None, None)


def _ended_by_sigterm(owned: Path | None) -> None:
    """SIGTERM ends the worker at once, removing the folder of kept libraries it made
    (``owned``); its open sessions die with it (:func:`_dying_with`). ``sys.exit`` had the
    interpreter's exit wait for each session's process first, so a client holding a session
    open kept a terminated worker alive (a tutorial's ``proc.wait()`` hung 300 s in ``make
    test``). A session's own process ends on SIGTERM as a process does (:func:`_dying_with`)."""

    def end(*_: Any) -> None:
        if owned is not None:
            shutil.rmtree(owned, True)
        os._exit(0)

    signal.signal(signal.SIGTERM, end)


def _surviving(serving: Callable) -> Callable:
    """TVM's ``_serving`` (serve one client in a forked process, wait for it), reporting a
    session that died (killed, crashed in a kernel) and listening on, instead of raising. The
    client's connection is closed at once: it learns of the death, not by its timeout. A
    worker whose working folder was deleted under it serves from the system's temporary
    folder: TVM's loop asks for the folder before each session, and its error had ended the
    worker (a cluster brought up from a benchmark's clone, the clone made again)."""

    def serve_one(sock: socket.socket, addr: Any, opts: dict, load_library: Any) -> None:
        cwd = _existing_cwd()
        try:
            serving(sock, addr, opts, load_library)
        except FileNotFoundError:  # its folder deleted while it served: TVM's loop, going
            sock.close()  # back to it, raised before closing the client's connection
        except RuntimeError as err:  # "Child process N exited unsuccessfully ..."
            sock.close()
            print(f"tvm-hetero worker: the session of {addr[0]} ended: {err}", flush=True)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.chdir(cwd)
            _existing_cwd()

    return serve_one


def _existing_cwd() -> str:
    """The working folder, or the system's temporary folder, moved to, where it was deleted."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        os.chdir(tempfile.gettempdir())
        return os.getcwd()


def _dying_with(worker_pid: int, serve_loop: Callable) -> Callable:
    """TVM's ``_serve_loop`` (a session's process), killed with its worker: a killed worker
    served on through a session no one could stop (654 s of a run, re-parented to init)."""

    def session(*args: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the worker's (_ended_by_sigterm)
        if sys.platform.startswith("linux"):
            import ctypes

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
            if os.getppid() != worker_pid:  # the worker died before the line above
                os._exit(1)
        serve_loop(*args)

    return session


def _work_file(file_name: str) -> str:
    """The path of ``file_name`` in the session's work folder; a name that is not a plain file
    name (``../x``, ``/etc/x``, ``..``) is refused, so no client writes outside the folder."""
    import tvm

    plain = isinstance(file_name, str) and file_name not in ("", ".", "..")
    if not plain or Path(file_name).name != file_name or "\\" in file_name:
        raise ValueError(f"worker: {file_name!r} is not a plain file name in the work folder")
    folder = Path(tvm.get_global_func("tvm.rpc.server.workpath")("")).resolve()
    path = (folder / file_name).resolve()
    if path.parent != folder:
        raise ValueError(f"worker: {file_name!r} resolves outside the work folder")
    return str(path)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``tvm-hetero worker`` is the same)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9190)
    parser.add_argument("--port-end", type=int, default=9290)
    parser.add_argument("--key", default="")
    parser.add_argument("--cache", type=Path, help="folder of uploaded libraries kept")
    parser.add_argument("--cache-gb", type=float, default=CACHE_BYTES / 1e9)
    args = parser.parse_args(argv)
    cache_bytes = int(args.cache_gb * 1e9)
    serve(args.host, args.port, args.port_end, args.key, None, args.cache, cache_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
