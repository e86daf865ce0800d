"""Edge-cluster data path: worker-to-worker tensors against raw TCP, and a remote unit's call cost.

    .venv/bin/python benchmarks/cluster/bench.py [--repeat 20] [--out benchmarks/results/cluster.json]

Two ``tvm-hetero worker`` processes on loopback (TVM runtime library only). A tensor held by
worker A is pulled by worker B (``tvm_hetero.worker.fetch``, the pull a copy step commands,
here over RPC and waited for: B fetches from A's tensor server into a TVM tensor) and compared with raw TCP between two processes moving the same
bytes (``sendall`` / ``recv_into`` into a preallocated buffer, connection kept open). The call
cost of a remote unit (one RPC and the VM call) is compared with the same unit on a local worker.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def _raw_sender(port_q, repeat: int, nbytes: int) -> None:
    payload = np.ones(nbytes, dtype=np.uint8)
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port_q.put(srv.getsockname()[1])
        conn, _ = srv.accept()
        with conn:
            for _ in range(repeat + 2):
                conn.recv(1)  # request
                conn.sendall(memoryview(payload))


def raw_tcp_seconds(nbytes: int, repeat: int) -> float:
    """Median seconds to request and receive ``nbytes`` from another process over TCP."""
    port_q = mp.Queue()
    proc = mp.Process(target=_raw_sender, args=(port_q, repeat, nbytes), daemon=True)
    proc.start()
    sock = socket.create_connection(("127.0.0.1", port_q.get()))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = memoryview(np.empty(nbytes, dtype=np.uint8))
    samples = []
    for i in range(repeat + 2):
        start = time.perf_counter()
        sock.sendall(b"g")
        got = 0
        while got < nbytes:
            got += sock.recv_into(buf[got:])
        if i >= 2:
            samples.append(time.perf_counter() - start)
    sock.close()
    proc.join()
    return statistics.median(samples)


def start_worker(port: int) -> subprocess.Popen:
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    # killed at the end: no folder of kept libraries to leave behind
    args = ["-m", "tvm_hetero.cli.main", "worker", "--port", str(port), "--port-end",
            str(port + 1), "--cache-gb", "0"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True, env=env,
    )  # fmt: skip
    assert "listening" in proc.stdout.readline()
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results/cluster.json")
    args = parser.parse_args()

    import tvm

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.remote_worker import RemoteWorker
    from tvm_hetero.runtime.rpc_worker import PREFIX
    from tvm_hetero.runtime.worker import LocalWorker
    from tvm_hetero.zoo import load_zoo_model

    ports = [9411, 9412]
    procs = [start_worker(p) for p in ports]
    try:
        edges = [
            dataclasses.replace(cpu_device(0), name=n, host=f"127.0.0.1:{p}", threads=1)
            for n, p in zip(("edge-a", "edge-b"), ports, strict=True)
        ]
        model = load_zoo_model("mlp:tiny")
        lib = api.compile(model, [cpu_device(0)]).deployment.libraries[0]
        a, b = RemoteWorker(edges[0], lib), RemoteWorker(edges[1], lib)
        rows = []
        for nbytes in SIZES:
            held = a.move(np.ones(nbytes // 4, dtype=np.float32))
            fetch = b.session.get_function(PREFIX + "fetch")  # the pull, waited for over RPC
            samples = []
            for i in range(args.repeat + 2):
                start = time.perf_counter()
                fetch(a.address[0], a.data_port, held.name, "copy")  # into the last one's tensor
                if i >= 2:
                    samples.append(time.perf_counter() - start)
            worker_s = statistics.median(samples)
            raw_s = raw_tcp_seconds(nbytes, args.repeat)
            rows.append({"bytes": nbytes, "worker_to_worker_s": worker_s, "raw_tcp_s": raw_s,
                         "share_of_raw": raw_s / worker_s})  # fmt: skip
            print(f"{nbytes >> 10:>8} KiB  worker->worker {worker_s * 1e3:8.3f} ms "
                  f"({nbytes / worker_s / 1e9:6.2f} GB/s)  raw TCP {raw_s * 1e3:8.3f} ms "
                  f"({nbytes / raw_s / 1e9:6.2f} GB/s)  {raw_s / worker_s:5.0%} of raw")  # fmt: skip
        x = [np.random.default_rng(0).standard_normal(s.shape).astype(s.dtype)
             for s in api.compile(model, [cpu_device(0)]).deployment.inputs]  # fmt: skip
        local = LocalWorker(dataclasses.replace(edges[0], host=None), lib)
        calls = {}
        for name, worker in (("local", local), ("remote", a)):
            placed = [worker.move(v) for v in x] if name == "remote" else [
                tvm.runtime.tensor(v) for v in x]  # fmt: skip
            samples = []
            for _ in range(args.repeat * 10):
                start = time.perf_counter()
                worker.call("main", placed)
                samples.append(time.perf_counter() - start)
            calls[name] = statistics.median(samples)
        print(
            f"unit call: local {calls['local'] * 1e6:.1f} us, remote {calls['remote'] * 1e6:.1f} "
            f"us (+{(calls['remote'] - calls['local']) * 1e6:.1f} us per remote unit)"
        )
        for worker in (a, b, local):
            worker.close()
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
    Path(args.out).write_text(json.dumps({"transfers": rows, "unit_call_s": calls}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
