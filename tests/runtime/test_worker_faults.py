"""A worker survives its clients' sessions dying, and takes its sessions with it when it dies."""

import contextlib
import dataclasses
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.errors import RunError
from tvm_hetero.runtime import remote_worker
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.tensor_link import LinkError
from tvm_hetero.runtime.uploads import upload
from tvm_hetero.zoo import load_zoo_model

SIGNALS = [
    signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS,
    signal.SIGFPE, signal.SIGILL, signal.SIGQUIT, signal.SIGUSR1,
]  # fmt: skip
"""Nine ways a session's process ends abnormally (a crash in a kernel is a SIGSEGV)."""


def _edge(port: int):
    return dataclasses.replace(cpu_device(0), name="edge-a", host=f"127.0.0.1:{port}", threads=1)


def _fingerprint(session) -> str:
    return session.get_function("tvm_hetero.fingerprint")("cpu", 0, 1)


def _session_pids(
    worker: psutil.Process, port: int, ended: set[int] = frozenset(), timeout_s: float = 10.0
) -> list[int]:
    """The processes under the worker that hold a client's connection to ``port``: its session
    (none in ``ended``: a session just killed can still be listed, a zombie not yet reaped).
    Found by the connection, not as the worker's first child: in ``make test`` the child
    signalled was three times not the session the client talked to (never alone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = []
        for proc in worker.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                if proc.pid in ended or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if any(c.laddr and c.laddr.port == port and c.raddr
                       for c in proc.net_connections(kind="tcp")):  # fmt: skip
                    found.append(proc.pid)
        if found:
            return found
        time.sleep(0.05)
    tree = [(p.pid, p.name()) for p in worker.children(recursive=True)]
    pytest.fail(f"no session holds a connection to port {port}: {tree}")


def _held(pid: int, sig: signal.Signals) -> bool:
    """Whether process ``pid`` ignores or blocks ``sig`` (its ``SigIgn`` / ``SigBlk`` masks)."""
    masks = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigIgn", "SigBlk"):
            masks[key] = int(value.strip(), 16)
    return any(mask >> (int(sig) - 1) & 1 for mask in masks.values())


def test_sessions_killed_nine_ways_then_a_tenth_client_runs(start_workers):
    ((port, proc),) = start_workers(1)
    worker = psutil.Process(proc.pid)
    model = load_zoo_model("mlp:tiny")
    deployment = api.compile(model, [_edge(port)]).deployment
    inputs = model.random_inputs()
    ended: set[int] = set()
    for sig in SIGNALS:
        session, _ = remote_worker.connect_worker(_edge(port), timeout_s=10.0)
        for pid in _session_pids(worker, port, ended):
            assert not _held(pid, sig), f"the session {pid} ignores or blocks {sig!r}"
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).send_signal(sig)
            ended.add(pid)
        start = time.perf_counter()
        with pytest.raises(Exception):  # noqa: B017, PT011 - TVM's RPC error, whatever its words
            _fingerprint(session)
        assert time.perf_counter() - start < 10, sig
        assert proc.poll() is None, f"the worker died with its session ({sig!r})"
        del session
    with Executor(deployment, timeout_s=30) as executor:
        (got,) = executor.run(inputs)
    (want,) = api.run(api.compile(model, [cpu_device(0)]), inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_killed_worker_takes_its_session_with_it(start_workers):
    ((port, proc),) = start_workers(1)
    worker = psutil.Process(proc.pid)
    session, _ = remote_worker.connect_worker(_edge(port), timeout_s=10.0)
    (pid,) = _session_pids(worker, port)
    child = psutil.Process(pid)
    worker.kill()
    child.wait(timeout=10)  # raises psutil.TimeoutExpired if the session lives on
    del session


def test_a_terminated_worker_exits_at_once_with_a_session_open(start_workers):
    """SIGTERM ends a worker while a client holds a session open, the session with it, and
    removes the temporary folder the worker made: the interpreter's exit had waited for the
    session's process, and a tutorial's ``proc.wait()`` after ``terminate()`` hung 300 s in
    ``make test``."""
    ((port, proc),) = start_workers(1, own_cache=True)
    worker = psutil.Process(proc.pid)
    folder = Path(worker.cwd())  # the worker works in the folder it made
    session, _ = remote_worker.connect_worker(_edge(port), timeout_s=10.0)
    (pid,) = _session_pids(worker, port)
    child = psutil.Process(pid)
    proc.terminate()
    assert proc.wait(timeout=10) == 0  # raises subprocess.TimeoutExpired if it lives on
    _, alive = psutil.wait_procs([child], timeout=10)
    assert not alive and folder.name.startswith("tvm-hetero-worker-") and not folder.exists()
    del session


def test_a_worker_serves_on_when_the_folder_it_started_in_is_deleted(start_workers, tmp_path):
    """The folder a worker started in is deleted under it (a cluster brought up from a
    benchmark's clone, the clone made again), then its own folder while a session is open:
    every session runs, and the worker lives (TVM's loop asked for the folder before each
    session and went back to it after, and either error ended the worker)."""
    import shutil

    started_in, own = tmp_path / "clone", tmp_path / "own"
    started_in.mkdir()
    ((port, proc),) = start_workers(1, extra=("--cache", str(own)), cwd=started_in)
    for k in range(3):
        session, _ = remote_worker.connect_worker(_edge(port), timeout_s=10.0)
        assert _fingerprint(session)
        if k == 1:
            shutil.rmtree(own)  # while the session is open
        del session
        if k == 0:
            shutil.rmtree(started_in)
    time.sleep(0.5)
    assert proc.poll() is None, "the worker died"


def test_connecting_to_a_busy_worker_honours_the_run_timeout(start_workers):
    ((port, _),) = start_workers(1)
    busy, _ = remote_worker.connect_worker(_edge(port), timeout_s=10.0)
    deployment = api.compile(load_zoo_model("mlp:tiny"), [_edge(port)]).deployment
    start = time.perf_counter()
    with pytest.raises(RunError, match="no free worker for edge-a"):
        Executor(deployment, timeout_s=1.5)
    assert time.perf_counter() - start < 5
    del busy


@pytest.mark.parametrize("name", ["../escaped.so", "/tmp/escaped.so", "..", "a/b.so"])
def test_a_client_cannot_write_outside_the_session_folder(start_workers, tmp_path, name):
    ((port, proc),) = start_workers(1)
    session, _ = remote_worker.connect_worker(_edge(port), timeout_s=10.0)
    data_port = session.get_function("tvm_hetero.worker.data_port")()
    library = tmp_path / "lib.so"
    library.write_bytes(b"x")
    with pytest.raises(LinkError, match="not a plain file name"):  # the worker's answer
        upload("127.0.0.1", data_port, library, name, timeout_s=10.0)
    assert not (tmp_path / "escaped.so").exists()
    assert not Path("/tmp/escaped.so").exists()
    assert _fingerprint(session)  # the session goes on
    assert proc.poll() is None
