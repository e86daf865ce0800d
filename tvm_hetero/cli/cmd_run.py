"""``tvm-hetero run FILE --inputs in.npz --outputs out.npz --print-time``."""

from __future__ import annotations

import argparse

import numpy as np

from tvm_hetero import api
from tvm_hetero.build import runner
from tvm_hetero.cli.common import console, table
from tvm_hetero.frontends.model import InputSpec


def _inputs(specs: list[InputSpec], path: str | None) -> dict[str, np.ndarray]:
    if path is None:
        rng = np.random.default_rng(0)
        return {s.name: s.random(rng) for s in specs}
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def run(args: argparse.Namespace) -> int:
    """Run once, save outputs, optionally time."""
    vm, home, meta = api.load_compiled(args.file)
    specs = [
        InputSpec(i["name"], tuple(i["shape"]), i["dtype"], i.get("high")) for i in meta["inputs"]
    ]
    feed = api.ordered_args(specs, _inputs(specs, args.inputs))
    outputs = runner.run(vm, feed, home)
    devices = ", ".join(v["name"] for v in meta["vdevices"])
    console().print(f"ran {meta['model']} on {devices}: outputs {[list(o.shape) for o in outputs]}")
    if args.outputs:
        np.savez(args.outputs, **{f"output_{i}": o for i, o in enumerate(outputs)})
        console().print(f"wrote {args.outputs}")
    if args.print_time:
        with console().status(f"timing {args.repeat} runs"):
            stats = runner.time_run(vm, feed, home, args.repeat, args.number)
        rows = [[stats.median_ms, stats.p99_ms, stats.mean_ms, stats.std_ms, len(stats.samples_ms)]]
        console().print(table("Latency (ms)", ["median", "p99", "mean", "std", "runs"], rows))
    return 0
