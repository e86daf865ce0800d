"""The claiming pool: TVM's parallel kernels run on it exactly as on TVM's pool, each task once,
with its workers taking tasks, and only in the threads that asked for it."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.runtime import claiming_pool

N = 1 << 16
LONG = 1 << 22

pytestmark = pytest.mark.skipif(
    claiming_pool.unavailable() is not None, reason=str(claiming_pool.unavailable())
)


@T.prim_func
def add_one_kernel(b: T.Buffer((N,), "float32")):
    for i in T.parallel(N):
        b[i] = b[i] + T.float32(1)


@T.prim_func
def add_one_long(b: T.Buffer((LONG,), "float32")):
    for i in T.parallel(LONG):
        b[i] = b[i] + T.float32(1)


@T.prim_func
def check_small(b: T.Buffer((LONG,), "float32")):
    for i in T.parallel(LONG):
        assert b[i] < T.float32(1), "an element is not below one"


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    """Modules compiled from now on take the pool's launcher (the package installs it when
    :mod:`tvm_hetero.runtime.worker` is imported)."""
    assert claiming_pool.install()


@pytest.fixture(scope="module")
def add_one() -> Any:
    return tvm.compile(add_one_kernel, target="llvm")["add_one_kernel"]


@pytest.fixture(scope="module")
def add_one_long_tasks() -> Any:
    """Tasks of a millisecond or so: a spinning worker claims one long before the caller is
    through its own (a task of microseconds the caller may finish and take the other's)."""
    return tvm.compile(add_one_long, target="llvm")["add_one_long"]


def _in_thread(job: Callable[[], Any]) -> Any:
    """``job()`` in a new thread (whose pool ends with it): its result, or its exception."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = job()
        except BaseException as err:  # re-raised in the test's thread
            out["error"] = err

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    return out["result"]


def _launches(kernel: Any, times: int, n: int = N) -> tuple[np.ndarray, int]:
    b = tvm.runtime.tensor(np.zeros(n, "float32"))
    for _ in range(times):
        kernel(b)
    return b.numpy(), claiming_pool.worker_tasks()


@pytest.mark.whole_machine  # a worker takes a task only if it gets a core while the caller works
def test_every_task_runs_once_a_launch_and_the_workers_take_some(add_one_long_tasks):
    def job() -> tuple[np.ndarray, int]:
        assert claiming_pool.use(2)
        return _launches(add_one_long_tasks, 40, LONG)

    values, worker_tasks = _in_thread(job)
    np.testing.assert_array_equal(values, np.full(LONG, 40, "float32"))  # none skipped or twice
    assert worker_tasks > 0


def test_workers_that_sleep_between_launches_change_nothing(add_one, monkeypatch):
    """Workers that sleep after each launch wake late, into the next launch or after it: the
    caller runs what they have not claimed, and no task of a launch runs twice or after it."""
    monkeypatch.setenv("TVM_THREAD_POOL_SPIN_COUNT", "0")

    def job() -> np.ndarray:
        assert claiming_pool.use(3)
        return _launches(add_one, 2000)[0]

    np.testing.assert_array_equal(_in_thread(job), np.full(N, 2000, "float32"))


def test_a_thread_without_the_pool_launches_on_tvms(add_one):
    claiming_pool.use(2)  # the launcher is installed in the process
    values, worker_tasks = _in_thread(lambda: _launches(add_one, 10))
    np.testing.assert_array_equal(values, np.full(N, 10, "float32"))
    assert worker_tasks == -1


def test_tvm_hetero_pool_tvm_leaves_tvms_pool(add_one, monkeypatch):
    monkeypatch.setenv("TVM_HETERO_POOL", "tvm")
    assert claiming_pool.unavailable() == "TVM_HETERO_POOL=tvm"
    assert not claiming_pool.install()

    def job() -> tuple[np.ndarray, int]:
        assert not claiming_pool.use(2)
        return _launches(add_one, 10)

    values, worker_tasks = _in_thread(job)
    np.testing.assert_array_equal(values, np.full(N, 10, "float32"))
    assert worker_tasks == -1


def _workers_of(thread: int) -> int:
    """The live workers of the pool of ``thread`` (a native thread id): they are named
    ``tvmh-<thread>``."""
    named = 0
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            named += Path(f"/proc/self/task/{task}/comm").read_text().strip() == f"tvmh-{thread}"
    return named


def _settles_at_none(thread: int) -> int:
    """The workers of ``thread``'s pool once none is left or 5 s have passed (a Python thread is
    joined before its OS thread has ended, and its pool's workers end as that does)."""
    deadline = time.monotonic() + 5
    while _workers_of(thread) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _workers_of(thread)


def test_a_pools_workers_end_with_its_thread_or_its_release(add_one):
    def job() -> tuple[int, int, int]:
        me = threading.get_native_id()
        claiming_pool.use(3)
        _launches(add_one, 5)
        with_pool = _workers_of(me)
        claiming_pool.release()
        released = _workers_of(me)
        claiming_pool.use(2)
        return me, with_pool, released

    me, with_pool, released = _in_thread(job)
    assert (with_pool, released) == (2, 0)
    assert _settles_at_none(me) == 0  # the second pool ended with its thread

    def pinned() -> tuple[int, int]:  # one worker a core, the caller's core not counted
        cores = sorted(os.sched_getaffinity(0))[:2]
        assert claiming_pool.use(len(cores), cores)
        _launches(add_one, 5)
        return threading.get_native_id(), _workers_of(threading.get_native_id())

    me, workers = _in_thread(pinned)
    assert workers == min(2, len(os.sched_getaffinity(0))) - 1
    assert _settles_at_none(me) == 0


def test_a_forked_child_runs_its_parents_pool_alone(add_one):
    """A child forked by a thread with a pool has none of its workers: its launches run in the
    thread itself, and none waits for a worker that is not there."""

    def job() -> int:
        claiming_pool.use(2)
        _launches(add_one, 3)
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when its launches ran every task
            code = 1
            try:
                code = 0 if (_launches(add_one, 5)[0] == 5).all() else 1
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return -1  # hung

    assert _in_thread(job) == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_a_task_that_fails_raises_its_error_in_the_caller(threads):
    """The second task (a worker's, mostly) fails: its message reaches the caller's thread."""
    kernel = tvm.compile(check_small, target="llvm")["check_small"]
    values = np.zeros(LONG, "float32")
    values[-1] = 5.0

    def job() -> None:
        assert claiming_pool.use(threads)
        kernel(tvm.runtime.tensor(np.zeros(LONG, "float32")))  # passes
        for _ in range(5):
            with pytest.raises(Exception, match="an element is not below one"):
                kernel(tvm.runtime.tensor(values))

    _in_thread(job)


def test_use_takes_at_least_one_thread():
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        claiming_pool.use(0)


def test_a_model_runs_the_same_on_both_pools(monkeypatch):
    """The same code and the same tasks: the outputs are equal to the bit."""
    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.zoo import load_zoo_model

    model = load_zoo_model("resnet18:tiny")
    feeds = model.random_inputs(seed=3)
    compiled = api.compile(model, [cpu_device(threads=2)])
    ours = api.run(compiled, feeds)
    monkeypatch.setenv("TVM_HETERO_POOL", "tvm")
    theirs = api.run(compiled, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
