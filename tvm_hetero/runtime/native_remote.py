"""A remote worker's program run natively: no Python between two of its steps (issue 60).

In Python (``rpc_worker._Session._run_program``) every step of a remote program ran Python on
both sides of a hand-over: the sender's push (a header packed, a send), the reader's poll,
receive, parse and hold, the next unit's arguments looked up by name; a crossing between two
remote workers cost about 30 us on loopback, several times a bare Python ping-pong. Here the
program runs in C (``native/remote_programs.c``, built as the local native programs are, at
first use, with the system's C compiler, and cached): the session's program thread makes one
FFI call a run, with the GIL released, which calls the units through TVM FFI's C API, pushes
what peers' programs read on the program links (the same wire format as
:mod:`.program_links`, so a native worker and a Python one talk to each other), and reads its
own links itself: spinning ``spin_s`` (a worker with cores of its own), then sleeping on them.

What the C side does not do it asks the session for, through callbacks: the client's inputs
(``held``: the session's values, waited for as before), the values the client reads from this
worker (``hold``: only those the client said it reads, ``"held"`` in the program), pushes to a
data port (``deliver``: outputs the client downloads there), memory for a link value whose
shape or type is new (``allocate``: kept for that value and microbatch run after run), and the
links themselves (``relink``: a peer's link adopted while the program waits). A GPU worker, or
one where the library cannot be built (no compiler, ``TVM_HETERO_NATIVE=0``), runs the Python
program.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tvm
import tvm_ffi

from tvm_hetero.runtime.native_programs import NotNative, load_native, why_not
from tvm_hetero.runtime.rpc_worker import EVENT_FIELDS, late_error

if TYPE_CHECKING:
    from tvm_hetero.runtime.program_links import Inlinks, Outlinks

SOURCE = Path(__file__).with_name("native") / "remote_programs.c"
UNIT, ITEM = 0, 1
LINK, HELD = 0, 1
OK, LATE = 0, 2
NAMES = ("new", "function", "outlink", "links", "run", "events", "late", "free", "readable")


def functions() -> dict[str, Any] | None:
    """The native functions (``tvm_hetero.remote.*`` by their last part), or None
    (:func:`unavailable` says why)."""
    return load_native(SOURCE, "tvm_hetero_remote_register", "tvm_hetero.remote", NAMES)


def unavailable() -> str | None:
    """Why remote programs cannot run natively in this process, or None."""
    functions()
    return why_not(SOURCE)


def await_bytes(sock: socket.socket, spin_s: float) -> bool:
    """Spin up to ``spin_s``, with the GIL released, until ``sock`` has bytes to read (or its
    peer closed): True then; False when the time passed or the library is not here, and the
    caller sleeps in its receive as before. A thread asleep in a receive wakes some 35 us
    after the bytes came on the virtual cores these were measured on (a C ping-pong over
    loopback, blocking against spinning), and a request to a remote worker waited for two:
    the worker's for the command, the client's for the answer."""
    fns = functions() if spin_s > 0 else None
    return bool(fns is not None and fns["readable"](sock.fileno(), spin_s))


class NativeProgram:
    """A remote worker's program (``ops``, as ``program_runner.remote_ops`` makes it) run by
    ``remote_programs.c`` for ``session`` (an ``rpc_worker._Session``).

    Raises
    ------
    NotNative
        On a GPU, or where the library cannot be built here.
    """

    def __init__(
        self, session: Any, ops: list[dict], outlinks: Outlinks, inlinks: Inlinks, spin_s: float
    ) -> None:  # fmt: skip
        fns = functions()
        if fns is None:
            raise NotNative(unavailable())
        if session.gpu:
            raise NotNative(f"{session.name} is a GPU")
        self.session, self.ops, self.fns, self.inlinks = session, ops, fns, inlinks
        self.run_id, self.wait_s = 0, 0.0
        self.steps = np.asarray([op["step"] for op in ops] or [0], "float64")
        self.error: BaseException | None = None  # what a callback raised, raised again
        table, names, units, links = self._table(session.name)
        blob = np.frombuffer(b"".join(n.encode() + b"\0" for n in names) or b"\0", "uint8")
        hooks = (self._held, self._hold, self._deliver, self._allocate, self._relink)
        callbacks = [tvm_ffi.convert(self._guarded(f)) for f in hooks]
        blob_bytes = len(blob) if names else 0
        self.ctx = fns["new"](table.ctypes.data, len(table), blob.ctypes.data, blob_bytes,
                              inlinks.wake_fd, spin_s, *callbacks)  # fmt: skip
        for k, name in enumerate(units):
            fns["function"](self.ctx, k, session.functions[name])
        for o, (host, port) in enumerate(links):
            fns["outlink"](self.ctx, o, outlinks.fileno(host, port))
        self._relink()

    def _table(self, me: str) -> tuple[np.ndarray, list[str], list[str], list[tuple[str, int]]]:
        """The program as ``remote_programs.c``'s ``new`` reads it; the names it refers to,
        the unit functions and the peers' data ports (outlinks) by index. Also keeps, per op,
        the pushes to data ports (:meth:`_deliver`) and the external values (:meth:`_held`)."""
        own: dict[str, int] = {}
        names: dict[str, int] = {}
        units: dict[str, int] = {}
        links: dict[tuple[str, int], int] = {}
        self.external: list[tuple[int, str, str | None]] = []
        external: dict[str, int] = {}
        self.delivered: list[list] = []
        fields: list[int] = []
        ints: list[int] = []
        for i, op in enumerate(self.ops):
            unit = op["op"] == "unit"
            makers = op.get("from", {})
            refs = []
            for name in op["inputs"] if unit else [op["src"]]:
                if name in own:
                    refs.append(own[name])
                    continue
                if name not in external:
                    maker = makers.get(name)
                    kind = LINK if maker and maker != me else HELD
                    external[name] = len(self.external)
                    self.external.append((kind, name, maker))
                    names.setdefault(name, len(names))
                refs.append(-1 - external[name])
            linked, delivered = [], []
            for host, port, name, on_link in op["pushes"]:
                if on_link:
                    linked += [links.setdefault((host, int(port)), len(links)),
                               names.setdefault(name, len(names))]  # fmt: skip
                else:
                    delivered.append([host, port, name, False])
            self.delivered.append(delivered)
            function = units.setdefault(op["function"], len(units)) if unit else -1
            fields += [UNIT if unit else ITEM, function, len(refs), len(ints)]
            ints += refs
            fields += [len(linked) // 2, len(ints)]
            ints += linked
            fields += [int(op.get("held", True)), int(bool(delivered)), op.get("index", -1)]
            own[op["out"]] = i
        head = [len(self.ops), len(self.external), len(units), len(links), len(names)]
        ext = [v for kind, name, _ in self.external for v in (kind, names[name])]
        table = np.asarray([*head, *fields, len(ints), *ints, *ext], dtype="int32")
        return table, list(names), list(units), list(links)

    def run(self, run: int, microbatches: int, wait_s: float) -> tuple[float, np.ndarray]:
        """The program for each microbatch of run ``run``: when it started and its events, as
        ``_Session._run_program`` gives them (rows of ``step, microbatch, start, end, waited,
        arity``, seconds from the start)."""
        self.run_id, self.wait_s, self.error = run, wait_s, None
        t0 = time.perf_counter()
        try:
            status = self.fns["run"](self.ctx, run, microbatches, wait_s, t0)
        except Exception:
            if self.error is not None:
                raise self.error from None
            raise
        if status == LATE:
            k, mb = self.fns["late"](self.ctx)
            _, name, maker = self.external[k]
            raise late_error(f"{run}/{mb}:{name}", wait_s, maker)
        events = np.empty((len(self.ops) * microbatches, EVENT_FIELDS))
        count = self.fns["events"](self.ctx, events.ctypes.data)
        events = events[:count]
        events[:, 0] = self.steps[events[:, 0].astype(int)]  # op -> the deployment's step
        return t0, events

    def _guarded(self, function: Any) -> Any:
        """``function``, keeping what it raises for :meth:`run` to raise again as it was (an
        error crossing TVM FFI keeps only its kind's name where FFI knows the kind)."""

        def call(*args: Any) -> Any:
            try:
                return function(*args)
            except BaseException as err:
                self.error = self.error or err
                raise

        return call

    def _prefix(self, mb: int) -> str:
        return f"{self.run_id}/{mb}:"

    def _held(self, k: int, mb: int) -> Any:
        _, name, maker = self.external[k]
        return self.session.value(self._prefix(mb) + name, self.wait_s, maker)

    def _hold(self, i: int, mb: int, value: Any) -> None:
        self.session.hold(self._prefix(mb) + self.ops[i]["out"], value)

    def _deliver(self, i: int, mb: int, value: Any) -> None:
        self.session._push(self.session._view(value), self._prefix(mb), self.delivered[i])

    @staticmethod
    def _allocate(_k: int, _mb: int, kind: str, *shape: int) -> Any:
        return tvm.runtime.empty(shape, kind, tvm.cpu(0))

    def _relink(self) -> None:
        self.fns["links"](self.ctx, *self.inlinks.fds())

    def close(self) -> None:
        """Free the program."""
        with contextlib.suppress(Exception):
            self.fns["free"](self.ctx)
