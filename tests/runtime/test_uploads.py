"""Libraries uploaded over a data port and kept by content (``runtime/uploads.py``)."""

import hashlib
import json
import os
import socket
import time
from pathlib import Path

import pytest

from tvm_hetero.runtime import uploads
from tvm_hetero.runtime.tensor_link import LinkError, TensorServer, recv_frame, send_frame
from tvm_hetero.runtime.uploads import LibraryStore, receive, upload


def _file(path: Path, nbytes: int, seed: int = 0) -> Path:
    path.write_bytes(bytes((seed + 7 * k) % 251 for k in range(nbytes)))
    return path


@pytest.fixture
def worker(tmp_path):
    """A data server whose uploads land in ``tmp_path/session`` (one plain name deep), with a
    store of ``max_bytes`` (None: no store); returns ``(start, session folder)``."""
    session = tmp_path / "session"
    session.mkdir()
    servers = []

    def work_file(name: str) -> str:
        if Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} is not a plain file name in the work folder")
        return str(session / name)

    def start(max_bytes: int | None) -> tuple[str, int]:
        store = None if max_bytes is None else LibraryStore(tmp_path / "kept", max_bytes)

        def command(message, conn):
            receive(message, conn, work_file, store, timeout_s=5.0)
            return False

        server = TensorServer(lambda name: (_ for _ in ()).throw(KeyError(name)), "127.0.0.1",
                              command)  # fmt: skip
        servers.append(server)
        return server.address

    yield start, session
    for server in servers:
        server.close()


def test_a_library_is_sent_once_and_given_from_the_store_after(worker, tmp_path, monkeypatch):
    start, session = worker
    host, port = start(max_bytes=10**6)
    lib = _file(tmp_path / "lib.so", 300_000)
    monkeypatch.setattr(uploads, "PIECE_BYTES", 4096)  # many pieces, hashed and written
    assert upload(host, port, lib, "a.so", timeout_s=5.0) is True
    assert (session / "a.so").read_bytes() == lib.read_bytes()
    assert upload(host, port, lib, "b.so", timeout_s=5.0) is False  # kept: nothing sent
    assert (session / "b.so").read_bytes() == lib.read_bytes()
    other = _file(tmp_path / "other.so", 1000, seed=3)  # over b.so, a link to the kept file:
    assert upload(host, port, other, "b.so", timeout_s=5.0) is True  # a new file, not into it
    assert upload(host, port, lib, "c.so", timeout_s=5.0) is False
    assert (session / "c.so").read_bytes() == lib.read_bytes()
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()
    assert digest in [p.name for p in (tmp_path / "kept").iterdir()]


def test_without_a_store_every_upload_is_sent(worker, tmp_path):
    start, session = worker
    host, port = start(max_bytes=None)
    lib = _file(tmp_path / "lib.so", 1000)
    assert upload(host, port, lib, "a.so", 5.0) and upload(host, port, lib, "a.so", 5.0)
    assert (session / "a.so").read_bytes() == lib.read_bytes()


def test_an_empty_library_round_trips(worker, tmp_path):
    start, session = worker
    host, port = start(max_bytes=10**6)
    lib = _file(tmp_path / "empty.so", 0)
    assert upload(host, port, lib, "e.so", 5.0) is True
    assert upload(host, port, lib, "e.so", 5.0) is False
    assert (session / "e.so").read_bytes() == b""


@pytest.mark.parametrize("name", ["../escaped.so", "/tmp/escaped.so", "..", ""])
def test_a_name_outside_the_session_folder_is_refused_and_the_connection_goes_on(
    worker, tmp_path, name
):
    start, session = worker
    host, port = start(max_bytes=10**6)
    lib = _file(tmp_path / "lib.so", 100)
    with pytest.raises(LinkError, match=r"upload refused: .*not a plain file name"):
        upload(host, port, lib, name, 5.0)
    assert not (tmp_path / "escaped.so").exists() and not Path("/tmp/escaped.so").exists()
    with socket.create_connection((host, port), timeout=5) as sock:  # one connection, two asks
        for bad, why in [
            ({"upload": "x.so", "bytes": -1, "sha256": "0" * 64}, "whole number"),
            ({"upload": "x.so", "bytes": 1, "sha256": "../etc"}, "hex digits"),
        ]:
            send_frame(sock, json.dumps(bad).encode())
            assert why in json.loads(recv_frame(sock))["error"]
    assert list(session.iterdir()) == []


def test_bytes_that_do_not_match_their_digest_leave_no_file(worker):
    start, session = worker
    host, port = start(max_bytes=10**6)
    with socket.create_connection((host, port), timeout=5) as sock:
        head = {"upload": "a.so", "bytes": 5, "sha256": hashlib.sha256(b"right").hexdigest()}
        send_frame(sock, json.dumps(head).encode())
        assert json.loads(recv_frame(sock)) == {"send": 5}
        sock.sendall(b"wrong")
        assert "do not match" in json.loads(recv_frame(sock))["error"]
    assert list(session.iterdir()) == [] and list((session.parent / "kept").iterdir()) == []


def test_an_upload_that_breaks_off_leaves_no_file(worker):
    start, session = worker
    host, port = start(max_bytes=10**6)
    with socket.create_connection((host, port), timeout=5) as sock:
        head = {"upload": "a.so", "bytes": 10**6, "sha256": "0" * 64}
        send_frame(sock, json.dumps(head).encode())
        assert json.loads(recv_frame(sock)) == {"send": 10**6}
        sock.sendall(b"x" * 1000)
    deadline = time.monotonic() + 5
    while list(session.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(session.iterdir()) == []


def test_the_store_drops_the_least_recently_used_past_its_size(tmp_path):
    store = LibraryStore(tmp_path / "kept", max_bytes=2500)
    digests = []
    for k in range(3):
        lib = _file(tmp_path / f"lib{k}.so", 1000, seed=k)
        digests.append(hashlib.sha256(lib.read_bytes()).hexdigest())
        store.keep(str(lib), digests[-1])
        os.utime(tmp_path / "kept" / digests[-1], (k, k))  # kept at times 0, 1, 2
        if k == 1:  # the first is used again: the second is now the oldest
            assert store.give(digests[0], 1000, str(tmp_path / "again.so"))
            os.utime(tmp_path / "kept" / digests[0], (5, 5))
    kept = {p.name for p in (tmp_path / "kept").iterdir()}
    assert kept == {digests[0], digests[2]}
    assert not store.give(digests[1], 1000, str(tmp_path / "gone.so"))
    assert not store.give(digests[2], 999, str(tmp_path / "short.so"))  # not those bytes
    assert (tmp_path / "lib1.so").exists()  # what a session holds stays


def test_a_store_of_zero_bytes_keeps_nothing(tmp_path):
    store = LibraryStore(tmp_path / "kept", max_bytes=0)
    lib = _file(tmp_path / "lib.so", 10)
    store.keep(str(lib), hashlib.sha256(lib.read_bytes()).hexdigest())
    assert list((tmp_path / "kept").iterdir()) == []
