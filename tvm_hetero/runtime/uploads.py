"""Libraries from the client to a worker over the worker's data port, kept there by content.

A remote worker's library used to arrive through TVM RPC ``write`` calls of 16 MiB: on loopback
with no CPU quota those moved 43 MiB/s where plain TCP into a file moved 385, and a search timed
every remote candidate in rounds, opening a new session and uploading every library again each
round (GPT-2 on the emulated mesh: 311 s of a 458 s search uploading three 619 MB libraries).
Here the bytes go over the data port (:mod:`.tensor_link`'s server) with ``sendfile``, and the
worker keeps what it received in a :class:`LibraryStore` named by the bytes' SHA-256, so a
session that asks for a library the worker already holds gets it without a byte sent.

Wire, on one data-port connection: the client sends the command frame ``{"upload": NAME,
"bytes": N, "sha256": HEX}``; the worker answers ``{"have": N}`` (taken from its store, done),
``{"send": N}`` or ``{"error": ...}``; after ``send`` come the N bytes and the worker answers
``{"done": N}`` once they are in the session's file ``NAME`` and their digest matches, or
``{"error": ...}``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tvm_hetero.runtime.tensor_link import LinkError, recv_frame, send_frame

UPLOAD = "upload"
"""The command's key on the data port."""
PIECE_BYTES = 4 * 2**20
"""The worker receives, hashes and writes a library this much at a time (it never holds the
whole file: TVM RPC's own upload held it two or three times over, which killed a worker held to
the memory its stage of ViT-Large fitted)."""
_DIGEST = re.compile(r"[0-9a-f]{64}")
_digests: dict[tuple[str, int, int], str] = {}
_digests_lock = threading.Lock()


def file_digest(path: Path) -> str:
    """The SHA-256 of ``path`` (hex), computed once per file version in this process."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _digests_lock:
        found = _digests.get(key)
    if found is None:
        with open(path, "rb") as f:
            found = hashlib.file_digest(f, "sha256").hexdigest()
        with _digests_lock:
            _digests[key] = found
    return found


def upload(host: str, port: int, path: Path, name: str, timeout_s: float) -> bool:
    """Send file ``path`` to the worker whose data port is ``host:port``, as its session's file
    ``name``; False when the worker already held those bytes (nothing sent). ``timeout_s``
    bounds each wait for the worker (a stalled one fails, it does not hang the client).

    Raises
    ------
    LinkError
        The worker refused the file, did not answer in time, or closed the connection.
    """
    digest, nbytes = file_digest(path), path.stat().st_size
    head = {UPLOAD: name, "bytes": nbytes, "sha256": digest}
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            send_frame(sock, json.dumps(head).encode())
            if "have" in _answer(sock):
                return False
            with open(path, "rb") as f:
                sock.sendfile(f)
            _answer(sock)
            return True
    except (OSError, ValueError) as err:
        raise LinkError(f"uploading {path.name} to {host}:{port}: {err}") from None


def _answer(sock: socket.socket) -> dict[str, Any]:
    answer = json.loads(recv_frame(sock))
    if "error" in answer:
        raise LinkError(answer["error"])
    return answer


class LibraryStore:
    """Libraries a worker received, kept by content for later sessions (forked processes that
    share the folder), the least recently used dropped past ``max_bytes``.

    Parameters
    ----------
    folder : Path
        Where they are kept (made if missing); files are named by their SHA-256.
    max_bytes : int
        What the folder may hold; 0 keeps nothing (each upload goes to its session alone).
    """

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder, self.max_bytes = Path(folder), int(max_bytes)
        self.folder.mkdir(parents=True, exist_ok=True)

    def give(self, digest: str, nbytes: int, dest: str) -> bool:
        """Link the kept library ``digest`` of ``nbytes`` to ``dest``; False if not kept."""
        kept = self.folder / digest
        try:
            if kept.stat().st_size != nbytes:
                return False
            _link(kept, dest)
            os.utime(kept)  # recently used
        except FileNotFoundError:  # never kept, or dropped by another session just now
            return False
        return True

    def keep(self, received: str, digest: str) -> None:
        """Keep the verified file ``received`` as ``digest`` (a link: no copy), then drop the
        least recently used others until the folder fits."""
        if self.max_bytes <= 0 or os.path.getsize(received) > self.max_bytes:
            return
        part = self.folder / f".{digest}.{os.getpid()}.{threading.get_ident()}"
        _link(Path(received), str(part))
        os.replace(part, self.folder / digest)
        kept = []
        for path in self.folder.iterdir():
            with contextlib.suppress(FileNotFoundError):  # dropped by another session
                if _DIGEST.fullmatch(path.name):
                    stat = path.stat()
                    kept.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in kept)
        for _, size, path in sorted(kept):
            if total <= self.max_bytes:
                break
            if path.name != digest:
                path.unlink(missing_ok=True)
                total -= size


def _link(src: Path, dest: str) -> None:
    """``dest`` the same file as ``src`` (a hard link; a copy across file systems)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dest)
    try:
        os.link(src, dest)
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise
        shutil.copyfile(src, dest)


def receive(
    message: dict, conn: socket.socket, work_file: Callable[[str], str],
    store: LibraryStore | None, timeout_s: float,
) -> None:  # fmt: skip
    """The worker's side of one ``upload`` command read from ``conn``. A bad name, size or
    digest is answered with an error (the connection goes on); bytes that break off or do not
    match their digest leave no file. ``work_file(name)`` is the session's path of ``name``
    (raising ``ValueError`` for one outside its folder)."""
    try:
        dest, nbytes, digest = work_file(message[UPLOAD]), message["bytes"], message["sha256"]
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"bytes must be a whole number >= 0, got {nbytes!r}")
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise ValueError(f"sha256 must be 64 lower-case hex digits, got {digest!r}")
    except (KeyError, TypeError, ValueError) as err:
        send_frame(conn, json.dumps({"error": f"upload refused: {err}"}).encode())
        return
    if store is not None and store.give(digest, nbytes, dest):
        send_frame(conn, json.dumps({"have": nbytes}).encode())
        return
    send_frame(conn, json.dumps({"send": nbytes}).encode())
    with contextlib.suppress(FileNotFoundError):  # a link to a kept file: never written into
        os.unlink(dest)
    conn.settimeout(timeout_s)
    try:
        got = _receive_into(conn, dest, nbytes)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dest)
        raise  # the connection is out of step: the server drops it
    finally:
        conn.settimeout(None)
    if got != digest:
        os.unlink(dest)
        answer = {"error": f"upload of {message[UPLOAD]!r}: its bytes do not match its sha256"}
    else:
        if store is not None:
            store.keep(dest, digest)
        answer = {"done": nbytes}
    send_frame(conn, json.dumps(answer).encode())


def _receive_into(conn: socket.socket, dest: str, nbytes: int) -> str:
    """``nbytes`` from ``conn`` into file ``dest``; their SHA-256."""
    hasher = hashlib.sha256()
    piece = memoryview(bytearray(min(PIECE_BYTES, max(nbytes, 1))))
    left = nbytes
    with open(dest, "wb") as out:
        while left:
            n = conn.recv_into(piece[: min(left, len(piece))])
            if n == 0:
                raise LinkError("the client closed the connection mid-upload")
            hasher.update(piece[:n])
            out.write(piece[:n])
            left -= n
    return hasher.hexdigest()
