"""Program links: what a remote worker's program sends goes straight to its peer's program.

A remote worker's program (``_Session.run_program`` in :mod:`.rpc_worker`) pushes each value a
peer reads as soon as the step that made it ends. Through the data port (:mod:`.tensor_link`) a
push reached the peer's server thread, which received it and woke the program thread: two
wake-ups of a sleeping thread and two JSON frames a value. Here each worker opens, at program
load, one connection to each peer whose program reads what it pushes and names itself on it (a
``{"link": NAME, "back": [HOST, PORT]}`` command); the peer's server hands that connection to its
program thread, which reads its values itself, waiting on the links and on a wake-up pipe (for
values that still come the other way: the client's inputs, pulls).

A link carries values both ways. ``back`` is the dialer's data port as the client names it: the
peer answers one byte (:data:`LINKED`) and, when its own program pushes to that address, sends
on the same connection instead of dialing one of its own (the client loads the programs one
after another, so the second of two workers that push to each other finds the first's link).
Over two one-way connections every value was acknowledged by a packet of its own, sent by the
reader's ``recv``: on loopback that put some three microseconds on each crossing between two
remote workers (``benchmarks/runtime/pingpong.c``, one connection against two); on one
connection the acknowledgement rides on the next value coming back. A link lives as long as the
session (:class:`Inlinks` owns it); a program loaded again sends on the links it has.

Where the worker's process has cores of its own (pinned to fewer than the machine's, no CPU
quota) the program thread first polls its links for :data:`SPIN_S` before it sleeps, as the
native local programs do; a worker under a CPU quota (an emulated device) never spins.

Wire format of a link, after its command: per value a binary header (:data:`HEAD`: the
payload's bytes, the lengths of the name, of the shape and of the type's name; then the name in
UTF-8, the shape as 8-byte signed integers and the type's name), then the raw bytes. A reader
takes what has arrived in one ``recv`` and finishes a value it has begun at once. Each value
crossed in a worker's Python program costs it the Python it runs between two system calls, and
that code runs cold (a JSON header, read in three ``recv`` calls, took 6-8 us a step where a
warm loop takes 1): the header is packed, a small value arrives in one call.
"""

from __future__ import annotations

import json
import math
import os
import select
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tvm_hetero.runtime.tensor_link import (
    _buffered,
    _recv_exact,
    contiguous,
    send_after,
    send_frame,
)

SPIN_S = 200e-6
"""How long a program's worker with cores of its own spins (a native latch) or polls (a
program link) before it sleeps: a wake from sleep costs about 30 us on this host, a spin that
ends in time well under one."""
LINK = "link"
"""The command that makes a data-port connection a program link: ``{"link": SENDER}``, with
``"back": [HOST, PORT]`` where the sender's program reads values on it too (see the module)."""
BOTH_WAYS = True
"""Whether a client asks its remote workers for links both ways (it tells each worker its own
address: ``RemoteWorker.load_program``); False: a link each way, as before (benchmarks compare
the two: ``benchmarks/runtime/programs.py --remote``)."""
LINKED = b"\x01"
"""A peer's answer to a link command with ``back``: the link is adopted, both ways."""
HEAD = struct.Struct("<QHBB")
"""A value's header on a link: its bytes, the lengths of its name (UTF-8), of its shape
(dimensions) and of its type's name; those three follow, the shape as ``<q`` each."""
LINK_TIMEOUT_S = 10.0
"""A link's timeout until its reader sets its own (a link is never blocking: see
:func:`_read_link`)."""
READ_BYTES = 64 * 2**10
"""What a reader takes from a link in one ``recv``: small values whole, with their headers."""


def quota_limited(
    cgroups: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> bool:
    """Whether this process's cgroup (``cgroups``, its ``/proc`` file, under ``root``) caps
    its CPU time: a v1 ``cpu.cfs_quota_us`` or a v2 ``cpu.max`` other than unlimited; False
    where that cannot be read."""
    try:
        lines = cgroups.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if "cpu" in names:
            for mount in (controllers, "cpu"):
                quota = root / mount / path.lstrip("/") / "cpu.cfs_quota_us"
                if quota.is_file():
                    return quota.read_text().strip() != "-1"
        if controllers == "":  # v2
            limit = root / path.lstrip("/") / "cpu.max"
            if limit.is_file():
                return not limit.read_text().startswith("max")
    return False


def spin_seconds() -> float:
    """:data:`SPIN_S` where this process has cores of its own, else 0 (see the module)."""
    try:
        mine = os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return 0.0
    return SPIN_S if len(mine) < (os.cpu_count() or 1) and not quota_limited() else 0.0


class Outlinks:
    """This worker's links to the peers its program pushes to, by data-port address.

    Parameters
    ----------
    name : str
        This worker's device name, which a peer blames for a value that does not come.
    timeout_s : float
        Connecting, or a send the peer does not take, longer than this fails.
    inlinks : Inlinks, optional
        The session's links: a peer's link there is sent on (no connection of its own), and a
        link this opens is read there too, both ways (see the module). Without it, a link
        carries values one way and is closed with these.
    me : tuple of (str, int), optional
        This worker's data port as the client names it to its peers (the link's ``back``).
    """

    def __init__(
        self, name: str, timeout_s: float = 10.0, inlinks: Inlinks | None = None,
        me: tuple[str, int] | None = None,
    ) -> None:  # fmt: skip
        self.name, self.timeout_s = name, timeout_s
        self.inlinks, self.me = inlinks, me
        self._links: dict[tuple[str, int], tuple[socket.socket, threading.Lock]] = {}
        self._tails: dict[tuple, tuple[int, bytes, bytes]] = {}  # header ends, by both

    def open(self, host: str, port: int) -> None:
        """Send to the peer at ``host:port`` from now on: on the session's link with it, or
        on a connection opened (once) and named there."""
        if (host, port) in self._links:
            return
        shared = self.inlinks.link_to(host, port) if self.inlinks is not None else None
        if shared is None:
            conn = _buffered(socket.create_connection((host, port), timeout=self.timeout_s))
            conn.settimeout(self.timeout_s)
            both = self.inlinks is not None and self.me is not None
            command = {LINK: self.name, **({"back": list(self.me)} if both else {})}
            send_frame(conn, json.dumps(command).encode())
            if not both:
                self._links[host, port] = (conn, threading.Lock())
                return
            answer = bytearray(1)
            _recv_exact(conn, memoryview(answer))
            if bytes(answer) != LINKED:
                conn.close()
                raise ConnectionError(f"{host}:{port} did not take the link")
            self.inlinks.adopt(conn, (host, port))
            shared = conn
        # a socket of its own on the link (the reader's timeouts are its own)
        sender = socket.socket(fileno=os.dup(shared.fileno()))
        sender.settimeout(self.timeout_s)
        self._links[host, port] = (sender, threading.Lock())

    def send(self, host: str, port: int, name: str, array: np.ndarray) -> None:
        """``array`` to the peer's program as ``name`` (from any thread: one value at a time
        a link). Raises ``OSError`` (``KeyError`` for a peer never opened)."""
        conn, lock = self._links[host, port]
        array = contiguous(array)
        key = (array.shape, array.dtype)
        if (tail := self._tails.get(key)) is None:  # str(dtype) alone took 6 us
            shape, kind = array.shape, str(array.dtype).encode()
            tail = self._tails[key] = (
                len(shape), kind, struct.pack(f"<{len(shape)}q", *shape) + kind
            )  # fmt: skip
        label = name.encode()
        head = HEAD.pack(array.nbytes, len(label), tail[0], len(tail[1])) + label + tail[2]
        with lock:
            send_after(conn, head, array)

    def fileno(self, host: str, port: int) -> int:
        """The file descriptor of the link to the peer at ``host:port`` (a native program
        sends on it: :mod:`.native_remote`)."""
        return self._links[host, port][0].fileno()

    def close(self) -> None:
        """Close every link."""
        for conn, _ in self._links.values():
            conn.close()
        self._links.clear()


Allocate = Callable[[str, tuple[int, ...], str], tuple[Any, np.ndarray]]
"""``allocate(name, shape, dtype)`` -> the value to hold and a writable numpy view of it."""


class Inlinks:
    """The links whose values this worker's program thread reads (see the module)."""

    def __init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poller = select.poll()
        self._poller.register(self._wake_r, select.POLLIN)
        self._links: dict[int, socket.socket] = {}
        self._new: list[socket.socket] = []
        self._peers: dict[tuple[str, int], socket.socket] = {}
        self._read = memoryview(bytearray(READ_BYTES))
        self._lock = threading.Lock()
        self.blocked = False
        """Set (under the owner's lock) while the program thread sleeps: who holds a value
        then calls :meth:`wake`."""

    def adopt(self, conn: socket.socket, peer: tuple[str, int] | None = None) -> None:
        """Read ``conn`` (a link with a peer) from now on; any thread. With ``peer`` (the
        peer's data port as the client names it), :meth:`link_to` gives ``conn`` for it."""
        conn.settimeout(LINK_TIMEOUT_S)  # never blocking: a sender on it has a timeout
        with self._lock:
            self._new.append(conn)
            if peer is not None:
                self._peers[peer] = conn
        self.wake()

    def link_to(self, host: str, port: int) -> socket.socket | None:
        """The live link with the peer whose data port is ``host:port``, or None."""
        with self._lock:
            conn = self._peers.get((host, port))
            if conn is not None and _closed(conn):
                del self._peers[host, port]
                conn = None
        return conn

    def wake(self) -> None:
        """End the program thread's sleep in :meth:`receive`."""
        os.write(self._wake_w, b"!")

    @property
    def wake_fd(self) -> int:
        """What :meth:`wake` and :meth:`adopt` write to (a native program sleeps on it too)."""
        return self._wake_r

    def fds(self) -> list[int]:
        """The file descriptors of the links, those adopted since the last look included (a
        native program reads them itself: :mod:`.native_remote`)."""
        self._take_new()
        return list(self._links)

    def receive(
        self, timeout_s: float, allocate: Allocate, within_s: float
    ) -> list[tuple[str, Any]]:
        """The values that arrived within ``timeout_s`` (0: those already there), each read
        whole into ``allocate``'s memory, or none when woken or timed out. A value that has
        begun to arrive must end within ``within_s``. A link that closed, broke or stalled
        is dropped (its peer's values then do not come, and the reader's wait names the
        peer)."""
        self._take_new()
        got: list[tuple[str, Any]] = []
        for fd, _ in self._poller.poll(max(0, round(timeout_s * 1e3 + 0.5)) if timeout_s else 0):
            if fd == self._wake_r:
                os.read(self._wake_r, 4096)
                self._take_new()
                continue
            conn = self._links[fd]
            try:
                _read_link(conn, self._read, allocate, within_s, got)
            except Exception:  # closed, stalled, out of step, or a value no one can hold
                self._poller.unregister(fd)
                del self._links[fd]
                conn.close()
        return got

    def _take_new(self) -> None:
        """Poll the links adopted since the last look too."""
        with self._lock:
            for conn in self._new:
                self._links[conn.fileno()] = conn
                self._poller.register(conn.fileno(), select.POLLIN)
            self._new.clear()

    def close(self) -> None:
        """Close the links and the pipe."""
        with self._lock:
            links = [*self._links.values(), *self._new]
            self._links.clear()
            self._new.clear()
            self._peers.clear()
        for conn in links:
            conn.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


def _closed(conn: socket.socket) -> bool:
    """Whether the peer of ``conn`` closed or reset it, or this side closed it (bytes still
    to read do not count)."""
    if conn.fileno() < 0:
        return True
    hung_up = getattr(select, "POLLRDHUP", 0)  # Linux's: the peer's end closed
    poller = select.poll()
    poller.register(conn.fileno(), hung_up)
    return any(events & (hung_up | select.POLLHUP | select.POLLERR | select.POLLNVAL)
               for _, events in poller.poll(0))  # fmt: skip


def _read_link(
    conn: socket.socket, buffer: memoryview, allocate: Allocate, within_s: float,
    got: list[tuple[str, Any]],
) -> None:  # fmt: skip
    """Read what link ``conn`` (polled readable) holds into ``buffer`` in one ``recv``, and
    the values there whole into ``allocate``'s memory (appended to ``got``); a value begun and
    not whole is read to its end at once, each further ``recv`` within ``within_s``. Raises on
    a closed link, a stall or a header that makes no sense. (The link is never blocking: a
    worker's own program sends on it too, from a socket of its own with its own timeout, and
    a blocking mode is the connection's, not the socket's.)"""
    timeout = max(within_s, 1e-3)
    if conn.gettimeout() != timeout:  # a change costs a system call: only the first read's
        conn.settimeout(timeout)
    end = conn.recv_into(buffer)
    if end == 0:
        raise ConnectionError("the link closed")
    at = 0
    while at < end:
        if end - at < HEAD.size:  # a header begun: the rest of it
            at, end = _more(conn, buffer, at, end, HEAD.size)
        nbytes, n_name, ndim, n_kind = HEAD.unpack_from(buffer, at)
        size = HEAD.size + n_name + 8 * ndim + n_kind
        if end - at < size:
            at, end = _more(conn, buffer, at, end, size)
        start = at + HEAD.size
        name = bytes(buffer[start : start + n_name]).decode()
        shape = struct.unpack_from(f"<{ndim}q", buffer, start + n_name)
        kind = bytes(buffer[start + n_name + 8 * ndim : at + size]).decode()
        if min(shape, default=0) < 0 or math.prod(shape) * np.dtype(kind).itemsize != nbytes:
            raise ValueError(f"a header out of step: {name!r} {shape} {kind} {nbytes}")
        value, view = allocate(name, shape, kind)
        here = min(nbytes, end - at - size)
        if nbytes:
            data = memoryview(view).cast("B")
            data[:here] = buffer[at + size : at + size + here]
            if here < nbytes:  # the rest straight into the value's memory
                _recv_exact(conn, data[here:])
        got.append((name, value))
        at += size + here


def _more(conn: socket.socket, buffer: memoryview, at: int, end: int, size: int) -> tuple[int, int]:
    """The header begun at ``buffer[at:end]`` read to ``size`` bytes (moved to the buffer's
    start where it would not fit), each ``recv`` within ``conn``'s timeout; its new ``at,
    end``."""
    if size > len(buffer):
        raise ValueError("a header longer than a link's read buffer")
    if at + size > len(buffer):
        buffer[: end - at] = buffer[at:end]
        at, end = 0, end - at
    _recv_exact(conn, buffer[end : at + size])
    return at, at + size
