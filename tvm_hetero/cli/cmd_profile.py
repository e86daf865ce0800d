"""``tvm-hetero profile MODEL --device ... --db PATH``: per-operator times on each device."""

from __future__ import annotations

import argparse
from pathlib import Path

from tvm_hetero import api
from tvm_hetero.cli.common import (
    build_options,
    console,
    devices_from_args,
    model_from_args,
    progress_bar,
    table,
)
from tvm_hetero.costmodel.transfer import fit_transfer
from tvm_hetero.devices.discover import device_name
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.runtime.timer import runners_for

TRANSFER_SIZES = [2**k for k in range(10, 25, 2)]  # 1 KiB .. 16 MiB


def run(args: argparse.Namespace) -> int:
    """Profile every operator on every device, then transfers and (optionally) end to end."""
    model = model_from_args(args)
    devices = devices_from_args(args, ["cpu"])
    if args.minimal_runs:
        return _minimal_runs(model, devices, args.pim)
    if not args.db:
        raise ValueError("profile: --db PATH is required (the profile database)")
    db = ProfileDB(args.db)
    if db.problems:
        console().print(
            f"[yellow]{len(db.problems)} damaged record(s) skipped, first: {db.problems[0]}"
        )
    profilers = {
        name: Profiler(
            db,
            runner,
            MeasureConfig(args.repeat, args.min_repeat_ms),
            build_options(args),
        )
        for name, runner in runners_for(devices, args.remote).items()
    }
    profiler = profilers[devices[0].name]
    graph = OpGraph.from_module(model.mod)
    times = {}
    with progress_bar() as bar:
        for d in devices:
            task = bar.add_task(f"operators on {d.name}", total=len(graph.nodes))
            times[d.name] = profilers[d.name].profile_ops(
                model.mod, d, lambda what, done, total, t=task: bar.update(t, completed=done)
            )
    measured = sum(p.misses for p in profilers.values())
    stored = sum(p.hits for p in profilers.values())
    console().print(
        f"{len(graph.nodes)} operators x {len(devices)} device(s): {measured} measured, "
        f"{stored} from {args.db}"
    )
    console().print(_top_table(graph, devices, times, args.top))
    fits = {}
    if any(d.host for d in devices):
        console().print("links between workers: measure them with tvm-hetero cluster probe FILE")
    elif len(devices) > 1:
        fits = _transfers(profiler, devices)
    if args.end_to_end:
        placed = api.place(model, devices[:1], api.Placement((devices[0].name,)))
        rec = profiler.profile_model(placed, devices[:1], repeat=args.e2e_repeat, name=model.name)
        rows = [[rec.percentile_s(q) * 1e3 for q in (50, 99, 99.9)] + [rec.repeat]]
        console().print(
            table(
                f"{model.name} end to end on {devices[0].name} (ms)",
                ["p50", "p99", "p99.9", "runs"],
                rows,
            )
        )
    if args.plot:
        from tvm_hetero.viz.profile import plot_profile

        path = plot_profile(graph, times, fits, f"{model.name}: operator times", Path(args.plot))
        console().print(f"wrote {path}")
    return 0


def _minimal_runs(model, devices, pim: str | None) -> int:
    """Print DCG sizes, DA edges and Lee et al.'s profiling runs."""
    import time

    from tvm_hetero.plan.profiling_paths import profiling_runs
    from tvm_hetero.strategies.als.planner import PIM_OPS, dcg_of

    names = [d.name for d in devices]
    pim = device_name(pim) if pim is not None else None
    if pim is not None and pim not in names[1:]:
        raise ValueError(f"--pim {pim!r}: must be one of the non-home devices {names[1:]}")
    start = time.perf_counter()
    dcg = dcg_of(OpGraph.from_module(model.mod), names, {pim: PIM_OPS} if pim else None)
    runs = profiling_runs(dcg)
    elapsed = time.perf_counter() - start
    sizes = dcg.sizes()
    console().print(
        table(f"Device-mapped graph of {model.name}", list(sizes), [list(sizes.values())])
    )
    rows = []
    for i, r in enumerate(runs, 1):
        counts = [sum(1 for d in r.assignment.values() if d == k) for k in range(len(names))]
        rows.append(
            [
                i,
                r.purpose,
                ", ".join(f"{n}: {c}" for n, c in zip(names, counts, strict=True)),
                len(r.new_da_edges),
            ]
        )
    console().print(
        table(
            f"{len(runs)} profiling runs ({elapsed * 1e3:.1f} ms to find)",
            ["run", "measures", "operators per device", "new DA edges"],
            rows,
        )
    )
    return 0


def _top_table(graph: OpGraph, devices, times, top: int):
    first = devices[0].name
    order = sorted(graph.nodes, key=lambda n: -times[first][n.node_id].median_s)[:top]
    columns = ["operator", "op", "output"] + [f"{d.name} us" for d in devices]
    if len(devices) > 1:
        columns.append(f"{devices[0].name} / {devices[1].name}")
    rows = []
    for n in order:
        t = [times[d.name][n.node_id].median_s * 1e6 for d in devices]
        row = [n.node_id, n.op.removeprefix("relax."), str(list(n.outputs[0].shape or [])), *t]
        if len(devices) > 1:
            row.append(t[0] / t[1])
        rows.append(row)
    return table(f"Top {len(order)} operators by time on {first}", columns, rows)


def _transfers(profiler: Profiler, devices) -> dict:
    fits, rows = {}, []
    for src in devices:
        for dst in devices:
            if src is dst:
                continue
            records = profiler.profile_transfer(src, dst, TRANSFER_SIZES)
            sizes = [r.workload["bytes"] for r in records]
            fit = fit_transfer(sizes, [r.median_s for r in records])
            fits[(src.name, dst.name)] = (sizes, [r.median_s for r in records], fit)
            rows.append(
                [
                    f"{src.name} -> {dst.name}",
                    fit.latency_s * 1e6,
                    fit.bandwidth_bps / 1e9,
                    100 * fit.rel_error,
                ]
            )
    console().print(
        table(
            "Transfers: latency + bytes / bandwidth",
            ["copy", "latency us", "GB/s", "fit error %"],
            rows,
        )
    )
    return fits
