"""TVM's parallel kernels on a pool whose caller runs every task no other thread has claimed.

A compiled CPU kernel's parallel loop is cut into one task a thread and handed to the calling
thread's pool (``TVMBackendParallelLaunch``). TVM's pool gives task ``i`` to thread ``i`` and
waits for each: on an edge server where another process holds one core for a scheduler slice
(milliseconds), every kernel (tens of microseconds) that starts in that slice waits for the
thread on that core, and a model ran about twice as slow with a process busy half the time on
one of two cores where ONNX Runtime, whose caller takes what its workers have not, slowed by
a third to two thirds (``benchmarks/models/under_load.py``, 2026-12-07). Here
(``native/claiming_pool.c``, built with the system's C compiler at first use and cached) the
tasks of a launch are claimed from a counter by whichever of the pool's threads comes first, the
caller included, and the caller waits only for tasks already claimed. On a quiet machine each
thread still takes one task of each launch, in TVM's order.

The launcher is installed when :mod:`tvm_hetero.runtime.worker` is imported, by every path that
loads or runs compiled code (:func:`install`; :func:`use` and the deployment's loader install it
too): TVM FFI writes the launcher registered last into each module it loads or compiles in
memory from then on, so a module loaded before runs on TVM's pool. It serves the threads that
asked for a pool (:func:`use`: the workers' threads, the profiler's); any other thread's
launches go to TVM's pool as before. A worker of the pool looks for the next launch
``TVM_THREAD_POOL_SPIN_COUNT`` times (a yield each), as TVM's pool threads do, then sleeps.
``TVM_HETERO_POOL=tvm`` (read at each :func:`use`) or no C compiler leaves TVM's pool everywhere.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from tvm_hetero.runtime.native_build import build_native

SOURCE = Path(__file__).with_name("native") / "claiming_pool.c"


_library: ctypes.CDLL | str | None = None
"""The built and installed pool, or why it could not be (None: not tried yet)."""


def install() -> bool:
    """Build the pool (once, cached) and make it TVM's launcher for modules loaded from now on;
    False where it cannot be or is not wanted (:func:`unavailable` says why: with
    ``TVM_HETERO_POOL=tvm`` nothing of it is built or installed)."""
    return unavailable() is None


_loading = threading.Lock()


def _load() -> ctypes.CDLL | str:
    global _library
    with _loading:
        if _library is None:
            _library = _built_and_installed()
    return _library


def _built_and_installed() -> ctypes.CDLL | str:
    try:
        import tvm.base

        library = ctypes.CDLL(str(build_native(SOURCE)))
        tvm_launch = tvm.base._LOADED_LIBS["tvm_runtime"].TVMBackendParallelLaunch
        library.tvmh_pool_install.argtypes = [ctypes.c_void_p]
        if library.tvmh_pool_install(ctypes.cast(tvm_launch, ctypes.c_void_p)) != 1:
            raise OSError("registering the launcher with TVM FFI failed")
        library.tvmh_pool_use.argtypes = [
            ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int
        ]  # fmt: skip
        library.tvmh_pool_worker_tasks.restype = ctypes.c_long
        return library
    except (OSError, KeyError, AttributeError) as err:
        return f"the claiming pool is unavailable: {err}"


def unavailable() -> str | None:
    """Why the claiming pool cannot run in this process, or None."""
    if os.environ.get("TVM_HETERO_POOL", "claiming") == "tvm":
        return "TVM_HETERO_POOL=tvm"
    library = _load()
    return library if isinstance(library, str) else None


def use(threads: int, cores: Sequence[int] = ()) -> bool:
    """Give the calling thread a pool of ``threads`` threads (itself and ``threads - 1``
    workers; with ``cores``, one a core, the workers pinned to ``cores[1:]``), or, where the pool
    is unavailable (:func:`unavailable`), leave it TVM's. True when the thread has the pool."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    if unavailable() is not None:
        release()
        return False
    pinned = (ctypes.c_int * len(cores))(*cores) if len(cores) == threads else None
    library = _load()
    assert not isinstance(library, str)
    spin = int(os.environ.get("TVM_THREAD_POOL_SPIN_COUNT", "0") or 0)
    return library.tvmh_pool_use(threads, pinned, len(cores) if pinned else 0, spin) == 0


def release() -> None:
    """Give the calling thread's launches back to TVM's pool (its pool's workers end)."""
    if isinstance(_library, ctypes.CDLL):
        _library.tvmh_pool_use(0, None, 0, 0)


def worker_tasks() -> int:
    """Tasks the calling thread's pool's workers (not the thread itself) have run; -1 when the
    thread has no pool."""
    return _library.tvmh_pool_worker_tasks() if isinstance(_library, ctypes.CDLL) else -1


__all__ = ["SOURCE", "install", "release", "unavailable", "use", "worker_tasks"]
