"""``tvm-hetero collect-traces [MODEL ...] --cluster FILE -o traces.jsonl``: FlexPie's traces."""

from __future__ import annotations

import argparse

from tvm_hetero.cli.common import console, devices_from_args, progress_bar, progress_of


def run(args: argparse.Namespace) -> int:
    """Time tiles, transfers and joins on the devices (workers of ``--cluster``, or here)."""
    from tvm_hetero.devices.cluster import ClusterSpec
    from tvm_hetero.frontends import load_model
    from tvm_hetero.strategies.flexpie.traces import collect

    cluster = ClusterSpec.load(args.cluster) if args.cluster else None
    devices = devices_from_args(args, ["cpu@0", "cpu@1"])
    with console().status("loading models"):
        models = [load_model(name) for name in args.models]
    with progress_bar() as bar:
        counts = collect(
            models, devices, args.output, cluster, args.limit, args.db,
            progress=progress_of(bar, "traces"),
            seed=args.seed,
        )  # fmt: skip
    found = ", ".join(f"{n} {k}" for k, n in counts.items())
    console().print(
        f"appended {found} traces to {args.output} (next: tvm-hetero train {args.output} -o DIR)"
    )
    return 0
