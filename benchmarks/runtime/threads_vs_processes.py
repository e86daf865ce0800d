"""Why the runtime's workers are threads: a handoff between two threads against one between two
processes, and moving a tensor to another process through shared memory.

    .venv/bin/python benchmarks/runtime/threads_vs_processes.py [--rounds 2000] [--mib 4]

A handoff is what the executor does when a unit's output is the next unit's input on another
worker: wake the other side, let it run, wake the first again. Threads pass the tensor itself;
processes pass a message and the tensor through shared memory (one copy in).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import threading
import time
from multiprocessing import shared_memory

import numpy as np


def thread_round_trip_us(rounds: int) -> float:
    """Median microseconds of a ping-pong between two threads over ``queue.SimpleQueue``."""
    there: queue.SimpleQueue = queue.SimpleQueue()
    back: queue.SimpleQueue = queue.SimpleQueue()

    def echo() -> None:
        while (item := there.get()) is not None:
            back.put(item)

    worker = threading.Thread(target=echo, daemon=True)
    worker.start()
    median = _ping_pong(there.put, back.get, rounds)
    worker.join()
    return median


def _echo_process(conn) -> None:
    while (item := conn.recv()) is not None:
        conn.send(item)


def process_round_trip_us(rounds: int) -> float:
    """Median microseconds of a ping-pong between two processes over a pipe."""
    ours, theirs = mp.Pipe()
    proc = mp.get_context("fork").Process(target=_echo_process, args=(theirs,), daemon=True)
    proc.start()
    median = _ping_pong(ours.send, ours.recv, rounds)
    proc.join()
    return median


def _ping_pong(send, receive, rounds: int) -> float:
    """Median microseconds of ``send(i); receive()``; then ``send(None)`` stops the echo."""
    samples = []
    for i in range(rounds):
        start = time.perf_counter()
        send(i)
        receive()
        samples.append(time.perf_counter() - start)
    send(None)
    return float(np.median(samples)) * 1e6


def shared_memory_copy_us(mib: int, rounds: int = 50) -> float:
    """Median microseconds to put a ``mib`` MiB tensor into shared memory (the copy a process
    worker needs and a thread worker does not)."""
    x = np.random.default_rng(0).standard_normal(mib * (1 << 18)).astype("float32")
    shm = shared_memory.SharedMemory(create=True, size=x.nbytes)
    try:
        view = np.ndarray(x.shape, x.dtype, buffer=shm.buf)
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            view[:] = x
            samples.append(time.perf_counter() - start)
        del view
    finally:
        shm.close()
        shm.unlink()
    return float(np.median(samples)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--mib", type=int, default=4)
    args = parser.parse_args()
    t = thread_round_trip_us(args.rounds)
    p = process_round_trip_us(args.rounds)
    c = shared_memory_copy_us(args.mib)
    print(f"round trip between two threads:   {t:8.1f} us")
    print(f"round trip between two processes: {p:8.1f} us ({p / t:.1f}x)")
    print(f"a {args.mib} MiB tensor into shared memory: {c:8.1f} us (threads: 0, same memory)")


if __name__ == "__main__":
    main()
