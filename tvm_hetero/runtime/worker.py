"""Workers: one per device, each with its own VM, thread and (for a CPU) cores and thread count.

Workers are threads, not processes. TVM's CPU thread pool belongs to the thread that calls a
kernel, so a worker thread configured for ``cpu@1`` runs its kernels on core 1 with one thread
while ``cpu@0``'s worker runs on core 0; the FFI releases the GIL during every call, so the two
really run at the same time (measured: ``benchmarks/runtime``). Threads share the host's memory,
so a tensor passes from one CPU worker to another without a copy; processes would need shared
memory and a copy per crossing.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import tvm
from tvm.runtime.vm import VirtualMachine

from tvm_hetero.devices.spec import DeviceKind, DeviceSpec
from tvm_hetero.runtime import claiming_pool
from tvm_hetero.runtime.device import runtime_device

claiming_pool.install()  # before any module is loaded: TVM FFI gives modules loaded after it


class Worker(Protocol):
    """Runs the units of one device: load a library, call its functions, move tensors, time."""

    name: str
    spec: DeviceSpec
    device: tvm.runtime.Device

    def submit(self, job: Callable[[], None], priority: int = 0) -> None:
        """Run ``job`` on the worker (its thread, its cores), after the jobs already given of
        the same or a lower ``priority`` number (a pipelined run: the microbatch)."""

    def call(self, function: str, args: Sequence[Any]) -> Any:
        """Call a unit of the loaded library (from a job)."""

    def move(self, value: Any) -> Any:
        """``value`` (a tensor) on this worker's device (from a job)."""

    def sync(self) -> None:
        """Wait until the device has finished what it was given."""

    def fingerprint(self) -> dict[str, Any]:
        """The device as the profile database keys it."""

    def close(self) -> None:
        """Stop the worker."""


def _allow_threads(threads: int) -> None:
    """TVM caps a thread's pool at ``TVM_NUM_THREADS`` as it was when that pool was made (by
    default half the cores on x86), for good: raise the cap to every core before any pool exists,
    so that a pool first used with one thread (a one-core profile) can later use them all."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    cap = max(threads, os.cpu_count() or 1)
    if int(os.environ.get("TVM_NUM_THREADS", "0") or 0) < cap:
        os.environ["TVM_NUM_THREADS"] = str(cap)


def use_threads(threads: int) -> None:
    """Give the calling thread's TVM pool ``threads`` threads, not pinned by TVM: the calling
    thread keeps the cores it was allowed (TVM's pool sets them to every core, which undid a
    worker started under ``taskset``); its kernels run on the claiming pool
    (:mod:`.claiming_pool`) where it can be built."""
    _allow_threads(threads)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    tvm.get_global_func("runtime.config_threadpool")(1, threads)
    if allowed is not None:
        os.sched_setaffinity(0, allowed)
    claiming_pool.use(threads)


def configure_threads(spec: DeviceSpec) -> None:
    """Set the calling thread's TVM pool: pinned to ``spec.cores``, or ``spec.threads`` threads;
    its kernels run on the claiming pool (:mod:`.claiming_pool`) where it can be built."""
    if not spec.cores:
        use_threads(spec.threads or os.cpu_count() or 1)
        return
    _allow_threads(len(spec.cores))
    config = tvm.get_global_func("runtime.config_threadpool")
    config(-2, len(spec.cores), [str(c) for c in spec.cores])  # one thread pinned per core
    claiming_pool.use(len(spec.cores), spec.cores)


class JobThread:
    """A thread that runs jobs by priority number, then in the order given, after ``setup``
    ran in it (a pipelined run gives each microbatch's jobs its index: a stage works on the
    oldest microbatch it has input for).

    Raises
    ------
    BaseException
        Whatever ``setup`` raised, from the constructor.
    """

    def __init__(self, name: str, setup: Callable[[], None]) -> None:
        # a heap under a lock, and a token per job in a C queue to wake the thread: a
        # ``queue.PriorityQueue`` waits on a Python condition (a job's hand-over to a pinned
        # worker took 15-25 us with it in a traced run on this host; a C queue or a lock wakes
        # a thread in about 8 us, measured ping-pong, 2026-11-28)
        self._heap: list[tuple[float, int, Callable[[], None] | None]] = []
        self._heap_lock = threading.Lock()
        self._tokens: queue.SimpleQueue = queue.SimpleQueue()
        self._order = itertools.count()
        self._setup_error: BaseException | None = None
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(setup, ready), name=name, daemon=True
        )
        self._thread.start()
        ready.wait()
        if self._setup_error is not None:
            raise self._setup_error

    def _loop(self, setup: Callable[[], None], ready: threading.Event) -> None:
        try:
            setup()
        except BaseException as err:  # reported to the constructor
            self._setup_error = err
            ready.set()
            return
        ready.set()
        while True:
            self._tokens.get()
            with self._heap_lock:
                *_, job = heapq.heappop(self._heap)
            if job is None:
                return
            job()

    def submit(self, job: Callable[[], None], priority: float = 0) -> None:
        """Queue ``job``."""
        with self._heap_lock:
            heapq.heappush(self._heap, (priority, next(self._order), job))
        self._tokens.put(None)

    def pending(self) -> int:
        """Jobs queued and not yet started."""
        return len(self._heap)

    def join(self) -> None:
        """Wait until the thread has ended (after :meth:`close`: its last job returned)."""
        self._thread.join()

    def close(self, timeout_s: float = 10.0) -> bool:
        """Stop after the jobs already queued; False when a job is still stuck after
        ``timeout_s`` (on a dead peer: it is left to the daemon thread)."""
        if self._thread.is_alive():
            self.submit(None, math.inf)
            self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()


class LocalWorker:
    """A worker thread of this process with its own VM over one library.

    Parameters
    ----------
    spec : DeviceSpec
        The device; a CPU worker with ``cores`` is pinned to them.
    library : tvm.runtime.Module or tvm.runtime.Executable
        The device's compiled units.
    inline : bool
        Run jobs in the caller's thread instead (a deployment with a single unpinned worker:
        no hand-over between threads, exactly today's single VM).
    """

    def __init__(self, spec: DeviceSpec, library: Any, inline: bool = False) -> None:
        self.spec, self.name = spec, spec.name
        self.device = runtime_device(spec)
        self._library = library
        self._functions: dict[str, Any] = {}
        self._gpu = spec.kind is DeviceKind.CUDA
        # a GPU's unit launches kernels from whichever thread calls it (no thread pool of its
        # own; cuda:0 is the device a thread starts with): one thread at a time, by this lock
        self.anywhere = self._gpu and spec.index == 0
        self._lock = threading.Lock()
        self._thread: JobThread | None = None
        if inline:
            self._setup()
        else:
            self._thread = JobThread(f"tvm-hetero:{spec.name}", self._setup)

    def _setup(self) -> None:
        if self.spec.kind is DeviceKind.CPU:
            configure_threads(self.spec)
        self.vm = VirtualMachine(self._library, self.device)

    def submit(self, job: Callable[[], None], priority: int = 0) -> None:
        """Queue ``job`` on the worker's thread (or run it now, inline)."""
        if self._thread is None:
            job()
        else:
            self._thread.submit(job, priority)

    @property
    def threaded(self) -> bool:
        """Whether jobs run on a thread of its own (not inline in the caller's)."""
        return self._thread is not None

    def idle(self) -> bool:
        """Nothing queued and no unit running (what the executor asks before it runs a unit of
        an :attr:`anywhere` worker on the thread that made it ready)."""
        return self.pending() == 0 and not self._lock.locked()

    def pending(self) -> int:
        """Jobs queued on the worker's thread and not yet started."""
        return 0 if self._thread is None else self._thread.pending()

    def call(self, function: str, args: Sequence[Any]) -> Any:
        """Call unit ``function``; a GPU worker waits for its kernels so the timeline is true."""
        fn = self._functions.get(function)
        if fn is None:
            fn = self._functions[function] = self.vm.module[function]
        args = [self.move(a) if hasattr(a, "download") else a for a in args]
        with self._lock:
            out = fn(*args)
            if self._gpu:
                self.device.sync()
        return out

    def move(self, value: Any) -> Any:
        """Copy a tensor onto this worker's device (synchronous); a remote value is downloaded."""
        if hasattr(value, "download"):
            return tvm.runtime.tensor(value.download(), self.device)
        return value.copyto(self.device)

    def sync(self) -> None:
        """Wait for the device."""
        self.device.sync()

    def fingerprint(self) -> dict[str, Any]:
        """CPU / GPU name, threads and TVM version of this worker's device."""
        from tvm_hetero.runtime.device import local_fingerprint

        kind = "cuda" if self._gpu else "cpu"
        fp = local_fingerprint(kind, self.spec.index, self.spec.threads, "")
        return {"kind": fp.kind, "name": fp.name, "threads": fp.threads, "tvm": fp.tvm}

    def close(self) -> None:
        """Stop the thread (jobs already queued run first)."""
        if self._thread is not None:
            self._thread.close()
