"""``tvm-hetero run FILE --inputs in.npz --outputs out.npz --print-time --plot run.png``.

Imports only the TVM runtime (a GPU or edge box has no compiler).
"""

from __future__ import annotations

import argparse
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from tvm_hetero.cli.common import console, table


def _inputs(specs, path: str | None) -> dict[str, np.ndarray]:
    if path is None:
        rng = np.random.default_rng(0)
        return {s.name: s.random(rng) for s in specs}
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise ValueError(f"--inputs {path!r}: no such file") from None
    except (OSError, ValueError, zipfile.BadZipFile, AttributeError) as err:
        raise ValueError(f"--inputs {path!r}: not an .npz of arrays by name ({err})") from None


def _cluster_hosts(path: str) -> dict[str, str]:
    """``--cluster FILE``: the workers' addresses by device name."""
    from tvm_hetero.devices.cluster import ClusterSpec

    return {d.name: d.host for d in ClusterSpec.load(path).devices if d.host is not None}


def run(args: argparse.Namespace) -> int:
    """Run once, save outputs, optionally time and plot the measured timeline."""
    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import Executor

    hosts = _cluster_hosts(args.cluster) if args.cluster else None
    deployment = load(args.file, tempfile.mkdtemp(prefix="tvm_hetero_"))
    if hosts is not None:
        remote = {d.name for d in deployment.devices if d.host is not None}
        deployment = deployment.with_hosts({n: h for n, h in hosts.items() if n in remote})
    feed = _inputs(deployment.inputs, args.inputs)
    with Executor(deployment, timeout_s=args.timeout) as executor:
        outputs = executor.run(feed)
        timeline = executor.timeline
        devices = ", ".join(d.name for d in deployment.devices)
        console().print(
            f"ran {deployment.model} on {devices} ({len(deployment.units)} units, "
            f"{len(deployment.copies)} copies): outputs {[list(o.shape) for o in outputs]}"
        )
        if args.outputs:
            np.savez(args.outputs, **{f"output_{i}": o for i, o in enumerate(outputs)})
            console().print(f"wrote {args.outputs}")
        if args.print_time:
            with console().status(f"timing {args.repeat} runs"):
                stats = executor.time(feed, args.repeat)
                timeline = executor.timeline
            rows = [[stats.median_ms, stats.p99_ms, stats.p999_ms, stats.mean_ms, stats.std_ms,
                     len(stats.samples_ms)]]  # fmt: skip
            cols = ["p50", "p99", "p99.9", "mean", "std", "runs"]
            console().print(table("Latency (ms)", cols, rows))
    if args.plot:
        from tvm_hetero.viz.run_timeline import plot_run_timeline

        path = plot_run_timeline(timeline, f"{deployment.model}: measured run", Path(args.plot))
        console().print(f"wrote {path}")
    return 0
