"""``tvm-hetero cluster up|down SPEC`` and ``cluster probe FILE``: an emulated edge cluster on
this machine, and the links of a running one measured."""

from __future__ import annotations

import argparse
from pathlib import Path

from tvm_hetero.cli.common import console, progress_bar, table
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.errors import RunError


def _up(spec_path: Path, args: argparse.Namespace) -> int:
    from tvm_hetero.emulation import control
    from tvm_hetero.emulation.layout import cluster_tag, plan_layout

    spec = ClusterSpec.load(spec_path)
    layout = plan_layout(spec, cluster_tag(spec_path))
    out = Path(args.output) if args.output else spec_path.with_name(f"{spec_path.stem}-up.json")
    if out.resolve() == spec_path.resolve():
        raise ValueError(f"--output {str(out)!r} is the spec itself; name another file")
    why = control.missing_privilege()
    if why:
        raise ValueError(f"cannot make an emulated cluster: {why}")
    try:
        cluster = control.up(spec, layout, args.timeout, console().print)
    except control.EmulationError as err:
        raise RunError(f"{err} (everything made was removed)") from None
    cluster.save(out)
    rows = [
        [d.name, d.host, layout.node(d.name).namespace, ",".join(map(str, d.cores or [])) or "-",
         d.cpu_quota or "-", f"{d.memory_bytes / 2**20:.0f} MiB" if d.memory_bytes else "-"]
        for d in cluster.devices
    ]  # fmt: skip
    console().print(
        table(
            f"Emulated cluster {layout.tag} ({cluster.topology.value})",
            ["device", "worker", "namespace", "cores", "cpu quota", "memory cap"],
            rows,
        )
    )
    if any(ln.latency_ms for ln in cluster.links):
        console().print("[yellow]link latency is not emulated: this tc has no netem (tbf only)")
    console().print(f"wrote {out}; remove it all with: tvm-hetero cluster down {spec_path}")
    return 0


def _down(spec_path: Path) -> int:
    from tvm_hetero.emulation import control
    from tvm_hetero.emulation.layout import cluster_tag

    why = control.missing_privilege()
    if why:
        raise ValueError(f"cannot remove an emulated cluster: {why}")
    tag = cluster_tag(spec_path)
    found = control.down(tag)
    if not found:
        console().print(f"nothing of cluster {tag} ({spec_path}) was there")
        return 0
    rows = [[kind, len(items), ", ".join(items)[:48]] for kind, items in found.items()]
    console().print(table(f"Removed cluster {tag}", ["what", "count", "names"], rows))
    return 0


def _probe(path: Path, args: argparse.Namespace) -> int:
    from tvm_hetero.profiling.db import ProfileDB
    from tvm_hetero.profiling.link_probe import check_reachable, measured_cluster, probe_link

    cluster = ClusterSpec.load(path)
    local = [d.name for d in cluster.devices if d.host is None]
    if local:
        raise ValueError(f"{path}: device {local[0]!r} has no worker address (host) to probe")
    if not cluster.links:
        raise ValueError(f"{path}: the cluster has no links to probe")
    check_reachable(cluster)
    db = ProfileDB(args.db) if args.db else None
    probes = []
    with progress_bar() as bar:
        task = bar.add_task("links", total=len(cluster.links))
        for link in cluster.links:
            probes.append(probe_link(cluster, link, args.repeat))
            if db is not None:
                db.add(probes[-1].records)
            bar.update(task, advance=1)
    rows = [
        [f"{p.link.a}-{p.link.b}", p.link.bandwidth_mbps, round(p.bandwidth_mbps, 1),
         f"{p.bandwidth_mbps / p.link.bandwidth_mbps:.0%}", round(p.latency_ms, 3)]
        for p in probes
    ]  # fmt: skip
    console().print(
        table(
            f"Links of {path} ({args.repeat} pulls per size)",
            ["link", "spec Mbit/s", "measured", "ratio", "latency ms"],
            rows,
        )
    )
    if db is not None:
        console().print(f"{sum(len(p.records) for p in probes)} records added to {args.db}")
    if args.output:
        measured_cluster(cluster, probes).save(args.output)
        console().print(f"wrote {args.output} (links as measured)")
    return 0


def run(args: argparse.Namespace) -> int:
    """Bring an emulated cluster up or down, or probe a running cluster's links."""
    path = Path(args.file)
    if args.action == "up":
        return _up(path, args)
    if args.action == "down":
        return _down(path)
    return _probe(path, args)
