"""Tensors from worker to worker over plain TCP: the data path beside TVM RPC's control path.

TVM RPC carries the control (upload, load, call) between the client and each worker, one session
per worker; it has no way for one server to hand a tensor to another. So each remote worker also
runs a :class:`TensorServer`: a thread that answers "send me value NAME" with the value's bytes.
A consumer pulls what it needs (:class:`TensorFetcher`), so the producer's RPC loop stays free to
compute while its bytes leave.

Wire format, per request on a kept-open connection: the consumer sends a 4-byte little-endian
length and the value's name (UTF-8); the producer answers a 4-byte length and a JSON header
(``{"shape": [...], "dtype": "float32"}`` or ``{"error": "..."}``) and then the raw bytes.
A frame that is a JSON object instead of a name is a command for the server's owner (the client
telling a worker to pull a value from a peer, or sending it an input, the array following the
frame: :meth:`TensorFetcher.tell`); it gets no answer, so the client never waits for the
transfer, and the worker receives while it computes. Requests on one connection may be sent
before the last answer has arrived; answers come in the order asked.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import struct
import threading
from collections.abc import Callable, Sequence

import numpy as np

_LEN = struct.Struct("<I")
SOCKET_BUFFER_BYTES = 4 * 2**20
"""Kernel buffers asked for each tensor connection (the system caps them at ``net.core.wmem_max``
and ``rmem_max``): a whole activation fits, so the kernel sends and receives it at the link's
pace while the workers compute or wait out a CPU quota. With the defaults (16 KiB to send), a
worker held to a fraction of a core fed its link only while it ran."""


def _buffered(sock: socket.socket) -> socket.socket:
    """``sock`` with :data:`SOCKET_BUFFER_BYTES` buffers and no Nagle delay (receive buffers
    before ``connect``: the window scale is agreed then)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class LinkError(ConnectionError):
    """A peer that refused, closed, or did not answer in time."""


class MissingValue(LinkError):
    """The peer answered but holds no value of that name."""


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise LinkError("connection closed by the peer")
        got += n


def recv_frame(sock: socket.socket) -> bytes:
    head = bytearray(_LEN.size)
    _recv_exact(sock, memoryview(head))
    body = bytearray(_LEN.unpack(head)[0])
    _recv_exact(sock, memoryview(body))
    return bytes(body)


def frame_bytes(body: bytes) -> bytes:
    """``body`` as a frame: its length, then itself."""
    return _LEN.pack(len(body)) + body


def send_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(frame_bytes(body))


ONE_SEND_BYTES = 64 * 2**10
"""An array up to this size leaves in one ``sendall`` with its header (and a command before it):
on loopback each send wakes the receiver, and a 32-byte push in three sends took 189 us of a
worker's time on this host (``benchmarks/runtime/programs.py --remote``)."""


def contiguous(array: np.ndarray) -> np.ndarray:
    """``array`` in C order (``ascontiguousarray`` would make a 0-d array 1-d)."""
    return array if array.flags.c_contiguous else array.copy()


def _bytes_of(array: np.ndarray) -> bytes:
    """The bytes of C-contiguous ``array``, copied."""
    return memoryview(array).cast("B").tobytes() if array.nbytes else b""


def send_after(sock: socket.socket, head: bytes, array: np.ndarray) -> None:
    """``head``, then the bytes of C-contiguous ``array``: in one send up to
    :data:`ONE_SEND_BYTES`."""
    if array.nbytes <= ONE_SEND_BYTES:
        sock.sendall(head + _bytes_of(array))
        return
    sock.sendall(head)
    sock.sendall(memoryview(array).cast("B"))


_DTYPE_NAMES: dict[np.dtype, str] = {}
"""numpy's names of dtypes, kept: naming one anew cost more than the rest of a small send."""


def _array_head(array: np.ndarray) -> bytes:
    """The frame that comes before C-contiguous ``array``'s bytes: its shape and type."""
    dtype = _DTYPE_NAMES.get(array.dtype) or _DTYPE_NAMES.setdefault(array.dtype, str(array.dtype))
    return frame_bytes(json.dumps({"shape": list(array.shape), "dtype": dtype}).encode())


def send_array(sock: socket.socket, array: np.ndarray, before: bytes = b"") -> None:
    """Header and bytes of one array (after the frames ``before``)."""
    array = contiguous(array)
    send_after(sock, before + _array_head(array), array)


def send_command(sock: socket.socket, message: dict, array: np.ndarray | None = None) -> None:
    """A JSON command for the owner of a data port, and ``array`` after it (in one send with
    the command where it is small: :func:`send_after`)."""
    head, large = command_bytes(message, array)
    if large is None:
        sock.sendall(head)
    else:
        send_after(sock, head, large)


def command_bytes(
    message: dict, array: np.ndarray | None = None
) -> tuple[bytes, np.ndarray | None]:  # fmt: skip
    """What :func:`send_command` sends: its bytes (the command, ``array``'s header and, up to
    :data:`ONE_SEND_BYTES`, its bytes: a request's small puts and its command leave in one
    send, as each send on loopback can wake the receiver), and the C-contiguous array whose
    bytes are to follow them by themselves (None where none)."""
    head = frame_bytes(json.dumps(message).encode())
    if array is None:
        return head, None
    array = contiguous(array)
    head += _array_head(array)
    if array.nbytes > ONE_SEND_BYTES:
        return head, array
    return head + _bytes_of(array), None


Allocate = Callable[[tuple[int, ...], str], np.ndarray]
"""Where received bytes go: ``allocate(shape, dtype)`` -> a writable C-contiguous array (a view
of a TVM tensor's memory saves a copy)."""


def _numpy_empty(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


def recv_array(sock: socket.socket, allocate: Allocate = _numpy_empty) -> np.ndarray:
    """One array sent by :func:`send_array` (or the peer's error, raised)."""
    header = json.loads(recv_frame(sock))
    if "error" in header:
        raise MissingValue(header["error"])
    out = allocate(tuple(header["shape"]), header["dtype"])
    if out.nbytes:
        _recv_exact(sock, memoryview(out).cast("B"))
    return out


class TensorServer:
    """Serves values by name to consumers, from a thread of this process.

    Parameters
    ----------
    lookup : callable
        ``lookup(name)`` -> the value as a numpy array; raises ``KeyError`` for an unknown name.
    host : str
        Address to listen on (the worker's own); port chosen by the system.
    on_command : callable, optional
        ``on_command(message, conn)`` for a JSON-object frame, run in the connection's thread
        (a command that carries an array, :meth:`TensorFetcher.tell`, reads it from ``conn``);
        a true result means the owner has taken the connection over (a program link,
        :mod:`.program_links`): the server reads no more of it.
    """

    def __init__(
        self, lookup: Callable[[str], np.ndarray], host: str = "127.0.0.1",
        on_command: Callable[[dict, socket.socket], bool | None] | None = None,
    ) -> None:  # fmt: skip
        self._lookup, self._on_command = lookup, on_command
        self._sock = socket.create_server((host, 0))
        self.address = self._sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept, name="tensor-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(_buffered(conn),), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if not self._answer(conn):
            conn.close()

    def _answer(self, conn: socket.socket) -> bool:
        """Serve ``conn`` until it closes (False) or a command takes it over (True)."""
        while True:
            try:
                frame = recv_frame(conn)
            except (LinkError, OSError):
                return False
            if frame.startswith(b"{") and self._on_command is not None:
                try:
                    if self._on_command(json.loads(frame), conn):
                        return True
                except (LinkError, OSError, ValueError):  # its array broke off
                    return False
                continue
            name = frame.decode()
            try:
                array = self._lookup(name)
            except KeyError:
                send_frame(conn, json.dumps({"error": f"no value {name!r} here"}).encode())
                continue
            try:
                send_array(conn, array)
            except OSError:
                return False

    def close(self) -> None:
        """Stop listening."""
        self._sock.close()


Done = Callable[[np.ndarray | None, BaseException | None], None]
"""Called once per :meth:`TensorFetcher.fetch_later`: the array, or the error (``None`` else)."""
Asked = tuple[tuple[str, int], socket.socket]
"""A question sent (:meth:`TensorFetcher.question`): the owner's address and the connection its
answer comes on."""


class _Pipe:
    """One kept-open connection to a peer: requests leave as they are asked for, and a thread
    of its own receives the answers in order (the peer answers one request after another)."""

    def __init__(self, conn: socket.socket, where: str) -> None:
        self.conn, self.where = conn, where
        self.pending: queue.SimpleQueue = queue.SimpleQueue()
        self.broken: LinkError | None = None
        threading.Thread(target=self._receive, name="tensor-pipe", daemon=True).start()

    def _receive(self) -> None:
        while (item := self.pending.get()) is not None:
            name, allocate, done = item
            if self.broken is not None:
                done(None, self.broken)
                continue
            try:
                array = recv_array(self.conn, allocate)
            except MissingValue as err:  # answered: the connection is still in step
                done(None, err)
                continue
            except Exception as err:  # OSError, LinkError, a header out of step: never die
                self.broken = _link_error(f"fetching {name!r} from {self.where}", err)
                self.conn.close()
                done(None, self.broken)
                continue
            done(array, None)


def _link_error(what: str, err: BaseException) -> LinkError:
    why = "did not answer in time" if isinstance(err, TimeoutError) else str(err)
    return LinkError(f"{what}: {why}")


class TensorFetcher:
    """Pulls values from peers' :class:`TensorServer`, one kept-open connection per peer.

    Requests are pipelined: :meth:`fetch_later` sends its request at once, even while an
    earlier answer on the connection is still arriving, so the peer starts the next answer as
    soon as it has sent the last one; a request that waited for the last answer to arrive would
    leave a slow link idle while it crossed and the peer's server thread woke (on a worker held
    to a CPU quota, up to a quota period later).

    Parameters
    ----------
    timeout_s : float
        A peer that does not answer within this long raises :class:`LinkError`.
    """

    def __init__(self, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s
        self._pipes: dict[tuple[str, int], _Pipe] = {}
        self._told: dict[tuple[str, int], socket.socket] = {}
        self._asked: dict[tuple[str, int], socket.socket] = {}
        self._lock = threading.Lock()

    def _connect(self, key: tuple[str, int]) -> socket.socket:
        family, kind, proto, _, address = socket.getaddrinfo(*key, type=socket.SOCK_STREAM)[0]
        conn = _buffered(socket.socket(family, kind, proto))
        conn.settimeout(self.timeout_s)
        try:
            conn.connect(address)
        except OSError:
            conn.close()
            raise
        return conn

    def fetch_later(self, host: str, port: int, name: str, allocate: Allocate, done: Done) -> None:
        """Ask the peer at ``host:port`` for ``name`` now; ``done(array, error)`` is called
        from the connection's receiver thread once it has arrived in ``allocate``'s array
        (answers come in the order asked), or with the :class:`LinkError` (or
        :class:`MissingValue`) instead. A broken connection fails what was asked on it; the
        next request reconnects."""
        key = (host, port)
        with self._lock:
            pipe = self._pipes.get(key)
            try:
                if pipe is None or pipe.broken is not None:
                    pipe = self._pipes[key] = _Pipe(self._connect(key), f"{host}:{port}")
                send_frame(pipe.conn, name.encode())
            except OSError as err:
                if pipe is not None:
                    self._pipes.pop(key, None)
                    pipe.conn.close()
                    pipe.pending.put(None)
                done(None, _link_error(f"fetching {name!r} from {host}:{port}", err))
                return
            pipe.pending.put((name, allocate, done))

    def fetch(
        self, host: str, port: int, name: str, allocate: Allocate = _numpy_empty
    ) -> np.ndarray:
        """Value ``name`` from the peer at ``host:port``, received into ``allocate``'s array."""
        arrived = threading.Event()
        result: list = []
        self.fetch_later(
            host, port, name, allocate, lambda a, e: (result.extend((a, e)), arrived.set())
        )  # fmt: skip
        arrived.wait()
        array, err = result
        if err is not None:
            raise err
        return array

    def tell(self, host: str, port: int, message: dict, array: np.ndarray | None = None) -> None:
        """Send ``message`` (and ``array`` after it) to the owner of the server at
        ``host:port``; no answer awaited (the owner reads the array in the connection's
        thread)."""
        key = (host, port)
        with self._lock:
            try:
                conn = self._told.get(key) or self._told.setdefault(key, self._connect(key))
                send_command(conn, message, array)
            except OSError as err:
                dropped = self._told.pop(key, None)
                if dropped is not None:
                    dropped.close()
                raise _link_error(f"telling {host}:{port}", err) from None

    def ask(
        self, host: str, port: int, message: dict,
        puts: Sequence[tuple[str, np.ndarray]] = (), answer_s: float | None = None,
        after: Sequence[np.ndarray] = (),
        before_answer: Callable[[socket.socket], object] | None = None,
    ) -> bytes:  # fmt: skip
        """Send each of ``puts`` (a name and its array, held there as :meth:`tell`'s ``put``
        command is), ``message`` and the arrays ``after`` it (which the command reads) on a
        connection kept for asking (not :meth:`tell`'s: a put told while the answer is awaited
        must not wait for it), and return the one frame the owner answers, awaited
        ``answer_s`` (None: with no limit, a program's run takes what it takes and the
        caller's watchdog judges it; :meth:`close` ends the wait; ``before_answer``: called
        on the connection before the answer is received, as a spin). A connection that broke or
        was not answered in time is dropped (an answer coming late would be out of step); the
        next ask reconnects. In two halves: :meth:`question` and :meth:`answer`."""
        asked = self.question(host, port, message, puts, answer_s, after)
        return self.answer(asked, answer_s, before_answer)

    def question(
        self, host: str, port: int, message: dict,
        puts: Sequence[tuple[str, np.ndarray]] = (), send_s: float | None = None,
        after: Sequence[np.ndarray] = (),
    ) -> Asked:  # fmt: skip
        """:meth:`ask`'s sending half (each send within ``send_s``); its answer is taken by
        :meth:`answer` (one caller can ask several owners, then take their answers)."""
        key = (host, port)
        with self._lock:
            conn = self._asked.get(key)
            if conn is None:
                conn = self._asked[key] = self._connect(key)
        try:
            conn.settimeout(send_s)
            ahead = b""  # small puts leave with the command, in one send
            for name, array in puts:
                head, large = command_bytes({"put": name}, array)
                if large is None:
                    ahead += head
                else:
                    conn.sendall(ahead)
                    ahead = b""
                    send_after(conn, head, large)
            conn.sendall(ahead + command_bytes(message)[0])
            for array in after:
                send_array(conn, array)
        except OSError as err:
            self._drop(key, conn)
            raise _link_error(f"asking {host}:{port}", err) from None
        return key, conn

    def answer(
        self, asked: Asked, answer_s: float | None = None,
        before_answer: Callable[[socket.socket], object] | None = None,
    ) -> bytes:  # fmt: skip
        """The frame answering :meth:`question` ``asked``, awaited ``answer_s`` as
        :meth:`ask` says."""
        key, conn = asked
        try:
            conn.settimeout(answer_s)
            if before_answer is not None:
                before_answer(conn)
            return recv_frame(conn)
        except OSError as err:
            self._drop(key, conn)
            raise _link_error(f"asking {key[0]}:{key[1]}", err) from None

    def _drop(self, key: tuple[str, int], conn: socket.socket) -> None:
        with self._lock:
            if self._asked.get(key) is conn:
                del self._asked[key]
        conn.close()

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            for conn in self._asked.values():
                with contextlib.suppress(OSError):  # wakes a thread waiting there for an answer
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._asked.clear()
            for pipe in self._pipes.values():
                pipe.conn.close()
                pipe.pending.put(None)
            for conn in self._told.values():
                conn.close()
            self._pipes.clear()
            self._told.clear()
