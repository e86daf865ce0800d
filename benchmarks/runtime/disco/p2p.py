"""Point-to-point between Disco workers without NCCL: TCP on loopback, registered in Python.

Disco sends through ``runtime.disco.<ccl>.send_to_worker``, ``<ccl>`` being the worker's
collective library; the pinned wheel has none (only NCCL / RCCL exist in TVM, neither built
in), and a Python function cannot set a worker's ``ccl`` field, so without ``init_ccl`` it stays
empty and the name looked up is ``runtime.disco..send_to_worker``: registering that name is
enough. Each worker listens on ``BASE_PORT + its rank``; connections open on first use.
"""

from __future__ import annotations

import socket
import struct
import time

import numpy as np
import tvm_ffi

BASE_PORT = 47310
STATE: dict = {}


def _rank() -> int:
    return int(tvm_ffi.get_global_func("runtime.disco.worker_rank")())


def _listening() -> None:
    if "server" not in STATE:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", BASE_PORT + _rank()))
        server.listen(8)
        STATE.update(server=server, to={}, sent_by={})


def _to(peer: int) -> socket.socket:
    _listening()
    if peer not in STATE["to"]:
        conn = _connected(peer)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(struct.pack("<i", _rank()))
        STATE["to"][peer] = conn
    return STATE["to"][peer]


def _connected(peer: int, within_s: float = 10.0) -> socket.socket:
    """A connection to ``peer``, which listens only once it first sends or receives."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return socket.create_connection(("127.0.0.1", BASE_PORT + peer))
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.001)


def _from(peer: int) -> socket.socket:
    _listening()
    while peer not in STATE["sent_by"]:
        conn, _ = STATE["server"].accept()
        STATE["sent_by"][struct.unpack("<i", conn.recv(4, socket.MSG_WAITALL))[0]] = conn
    return STATE["sent_by"][peer]


@tvm_ffi.register_global_func("runtime.disco..send_to_worker", override=True)
def send_to_worker(buffer, receiver: int) -> None:
    """Send ``buffer``'s bytes to worker ``receiver``."""
    data = buffer.numpy().tobytes()
    _to(int(receiver)).sendall(struct.pack("<q", len(data)) + data)


@tvm_ffi.register_global_func("runtime.disco..recv_from_worker", override=True)
def recv_from_worker(buffer, sender: int) -> None:
    """Fill ``buffer`` with what worker ``sender`` sent."""
    conn = _from(int(sender))
    size = struct.unpack("<q", conn.recv(8, socket.MSG_WAITALL))[0]
    data = conn.recv(size, socket.MSG_WAITALL) if size else b""
    buffer.copyfrom(np.frombuffer(data, dtype=buffer.dtype).reshape(buffer.shape))


@tvm_ffi.register_global_func("p2p.zero_to_one", override=True)
def zero_to_one(buffer) -> None:
    """SPMD: worker 0 sends ``buffer`` to worker 1, which receives it into its own."""
    if _rank() == 0:
        tvm_ffi.get_global_func("runtime.disco.send_to_worker")(buffer, 1)
    else:
        tvm_ffi.get_global_func("runtime.disco.recv_from_worker")(buffer, 0)
