"""Scale past one machine, on paper: the planners' inputs and times for clusters of 4-64 devices.

    .venv/bin/python benchmarks/cluster/scale.py [--devices 4 16 64] [--model bert-small]

A generated star cluster (``benchmarks/results/cluster64.json``): the hub is this CPU; every
other device is SIMULATED, its operator times this CPU's measured times (profile database
``.tvm-hetero/scale.jsonl``) scaled by a speed factor drawn log-uniformly in [1/4, 4] (seed 0),
and its link to the hub 100-1000 Mbit/s with 0.2 ms latency; a transfer between two leaves
crosses both their links. Timed, per cluster size: the emulation layout (namespaces, links,
routes of ``cluster up``), allocating every device's worker through a real TVM RPC tracker
(SIMULATED workers: sockets that register, see :func:`tracker_allocation_seconds`), the
device-mapped graph (Lee et al.), the fewest profiling runs that
measure every cost (capped: ``--cap`` seconds), the assembly-line DP (its plan costed exactly)
and the priority baselines. Results to
``benchmarks/results/cluster_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from tvm_hetero.devices import ClusterSpec, DeviceSpec, cpu_device
from tvm_hetero.devices.spec import Link
from tvm_hetero.emulation.layout import plan_layout
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.als import Costs, als_assignment, best_priority_assignment, total_time
from tvm_hetero.plan.profiling_paths import profiling_runs
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.strategies.als.planner import dcg_of
from tvm_hetero.zoo import load_zoo_model

LATENCY_S = 2e-4


def generated_cluster(n: int, seed: int = 0) -> tuple[ClusterSpec, dict[str, float]]:
    """A star of ``n`` devices (hub: this CPU) and each device's speed factor."""
    rng = np.random.default_rng(seed)
    devices = [cpu_device(0)]
    speed = {devices[0].name: 1.0}
    links = []
    for i in range(1, n):
        name = f"edge-{i:02d}"
        speed[name] = float(np.exp(rng.uniform(np.log(0.25), np.log(4.0))))
        devices.append(DeviceSpec(name, "simulated", profile=f"cpu x {speed[name]:.3f} (scaled)"))
        links.append(Link(devices[0].name, name, float(rng.uniform(100, 1000)), LATENCY_S * 1e3))
    return ClusterSpec(tuple(devices), tuple(links), "star"), speed


def transfer_seconds(cluster: ClusterSpec, a: str, b: str, nbytes: int) -> float:
    """Over the direct link, or through the hub (two links)."""
    direct = cluster.link(a, b)
    if direct is not None:
        return direct.transfer_seconds(nbytes)
    hub = cluster.devices[0].name
    return sum(cluster.link(x, hub).transfer_seconds(nbytes) for x in (a, b))


def costs_for(cluster, speed, dcg, measured: dict[str, float]) -> Costs:
    node = {
        op: {k: measured[op] * speed[dcg.devices[k]] for k in dcg.capable[op]} for op in dcg.ops
    }
    itemsize = {"float32": 4, "float16": 2, "int64": 8, "int32": 4, "bool": 1}
    edge = {
        key: transfer_seconds(
            cluster,
            dcg.devices[key.src],
            dcg.devices[key.dst],
            key.elements * itemsize.get(key.dtype, 4),
        )
        for key in dcg.da_edges()
    }
    return Costs(node, edge)


def tracker_allocation_seconds(n: int, key: str = "edge") -> float:
    """Seconds for a client to be handed ``n`` workers by a real TVM RPC tracker process, the
    workers SIMULATED: ``n`` sockets that register with the tracker the way ``tvm.rpc`` servers
    do (magic, ``UPDATE_INFO``, ``PUT`` with a match key) but run nothing. The client sends the
    ``REQUEST`` of :func:`~tvm_hetero.runtime.remote_worker.connect_worker`, one per device."""
    import socket
    import struct
    import subprocess
    import sys

    from tvm.rpc import base

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tracker = subprocess.Popen(
        [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port",
         str(port), "--port-end", str(port + 1)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def handshake() -> socket.socket:
            for _ in range(600):  # the tracker imports TVM first
                try:
                    conn = socket.create_connection(("127.0.0.1", port))
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as connect_worker
                    break
                except OSError:
                    time.sleep(0.1)
            conn.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            assert struct.unpack("<i", base.recvall(conn, 4))[0] == base.RPC_TRACKER_MAGIC
            return conn

        servers = []
        for i in range(n):
            conn = handshake()
            base.sendjson(
                conn,
                [base.TrackerCode.UPDATE_INFO, {"key": f"server:{key}", "addr": [None, 20000 + i]}],
            )
            assert base.recvjson(conn) == base.TrackerCode.SUCCESS
            base.sendjson(conn, [base.TrackerCode.PUT, key, (20000 + i, f"{key}:{i}"), None])
            assert base.recvjson(conn) == base.TrackerCode.SUCCESS
            servers.append(conn)
        client = handshake()
        start = time.perf_counter()
        handed = set()
        for _ in range(n):
            base.sendjson(client, [base.TrackerCode.REQUEST, key, "", 1])
            reply = base.recvjson(client)
            handed.add(tuple(reply[1][1:]))
        elapsed = time.perf_counter() - start
        assert len(handed) == n, "the tracker handed one worker out twice"
        for conn in [*servers, client]:
            conn.close()
        return elapsed
    finally:
        tracker.kill()
        tracker.wait()


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _count_runs(dcg) -> int:
    return len(profiling_runs(dcg))


def _runs_capped(dcg, cap_s: float) -> tuple[int | None, float]:
    """The number of profiling runs and the time to find them, or ``None`` past ``cap_s``."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as Late

    pool = ProcessPoolExecutor(1, mp_context=mp.get_context("fork"))
    start = time.perf_counter()
    try:
        return pool.submit(_count_runs, dcg).result(timeout=cap_s), time.perf_counter() - start
    except Late:
        return None, cap_s
    finally:
        for proc in pool._processes.values():
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--model", default="bert-small")
    parser.add_argument("--cap", type=float, default=120, help="seconds for the profiling runs")
    parser.add_argument("--out", default="benchmarks/results/cluster_scale.json")
    args = parser.parse_args()
    model = load_zoo_model(args.model)
    graph = OpGraph.from_module(model.mod)
    Path(".tvm-hetero").mkdir(exist_ok=True)
    profiler = Profiler(ProfileDB(".tvm-hetero/scale.jsonl"), config=MeasureConfig(3, 1.0))
    measured = {k: r.median_s for k, r in profiler.profile_ops(model.mod, cpu_device(0)).items()}
    rows = []
    for n in args.devices:
        cluster, speed = generated_cluster(n)
        if n == max(args.devices):
            cluster.save(Path(args.out).with_name(f"cluster{n}.json"))
        emulable = ClusterSpec(
            tuple(DeviceSpec(d.name, "cpu", {"kind": "llvm"}) for d in cluster.devices),
            cluster.links, cluster.topology,
        )  # fmt: skip
        layout, layout_s = _timed(lambda c=emulable: plan_layout(c, "th0000"))
        dcg, dcg_s = _timed(lambda c=cluster: dcg_of(graph, [d.name for d in c.devices]))
        runs, runs_s = _runs_capped(dcg, args.cap)
        costs = costs_for(cluster, speed, dcg, measured)
        (chosen, _), dp_s = _timed(lambda d=dcg, c=costs: als_assignment(d, c))
        best = total_time(dcg, costs, chosen)
        used = len(set(chosen.values()))
        (_, base), base_s = _timed(lambda d=dcg, c=costs: best_priority_assignment(d, c))
        sizes = dcg.sizes()
        allocate_s = tracker_allocation_seconds(n)
        rows.append({
            "devices": n, "ops": len(dcg.ops), "da_edges": sizes["da_edges"],
            "dcg_nodes": sizes["dcg_nodes"], "profiling_runs": runs, "devices_used": used,
            "routes": len(layout.routes), "layout_s": layout_s, "dcg_s": dcg_s,
            "profiling_runs_s": runs_s, "dp_s": dp_s, "tracker_allocation_s": allocate_s, "baselines_s": base_s,
            "dp_ms": best * 1e3, "best_baseline_ms": base * 1e3,
            "home_only_ms": sum(measured.values()) * 1e3,
        })  # fmt: skip
        r = rows[-1]
        found = "over the cap" if runs is None else f"{runs} profiling runs"
        print(f"{n:3d} devices: {r['da_edges']:6d} DA edges, {found} ({runs_s:6.2f} s), DP "
              f"{dp_s * 1e3:8.1f} ms -> {r['dp_ms']:.3f} ms on {used} devices "
              f"(baseline {r['best_baseline_ms']:.3f}, {base_s * 1e3:.0f} ms), layout "
              f"{layout_s * 1e3:.1f} ms ({r['routes']} routes), tracker hands out {n} in "
              f"{allocate_s * 1e3:.1f} ms", flush=True)  # fmt: skip
    Path(args.out).write_text(json.dumps({"model": args.model, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
