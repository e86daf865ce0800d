"""``tvm-hetero devices``: this machine's devices, or a cluster file."""

from __future__ import annotations

import argparse

from tvm_hetero.cli.common import console, table
from tvm_hetero.devices import ClusterSpec, DeviceSpec, Topology, discover


def _device_rows(devices: tuple[DeviceSpec, ...] | list[DeviceSpec]) -> list[list]:
    rows = []
    for d in devices:
        target = ", ".join(f"{k}={v}" for k, v in d.target.items() if k != "host") or "-"
        memory = f"{d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else "-"
        kind = d.kind.value + (" (SIMULATED)" if d.simulated else "")
        where = f"{d.host} key {d.key}" if d.key else d.host or "local"
        rows.append([d.name, kind, d.index, target, memory, d.threads, where])
    return rows


def run(args: argparse.Namespace) -> int:
    """Print devices (and links); optionally save this machine's devices as a cluster file."""
    columns = ["name", "kind", "index", "target", "memory", "threads", "host"]
    if args.cluster:
        cluster = ClusterSpec.load(args.cluster)
        console().print(
            table(
                f"Cluster {args.cluster} ({cluster.topology.value})",
                columns,
                _device_rows(cluster.devices),
            )
        )
        links = [[ln.a, ln.b, ln.bandwidth_mbps, ln.latency_ms] for ln in cluster.links]
        console().print(table("Links", ["a", "b", "Mbit/s", "latency ms"], links))
        return 0
    devices = discover()
    console().print(table("Devices of this machine", columns, _device_rows(devices)))
    if len(devices) == 1:
        console().print(
            "No CUDA GPU visible: use [bold]cpu[/] and [bold]cpu:1[/] as two CPU vdevices."
        )
    if args.save:
        ClusterSpec(tuple(devices), topology=Topology.STAR).save(args.save)
        console().print(f"wrote {args.save}")
    return 0
