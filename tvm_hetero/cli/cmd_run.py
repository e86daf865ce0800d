"""``tvm-hetero run FILE --inputs in.npz --outputs out.npz --print-time --plot run.png``.

Imports only the TVM runtime (a GPU or edge box has no compiler).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from tvm_hetero.cli.common import check_memory, console, table
from tvm_hetero.errors import RunError

_NOT_NPZ = (OSError, ValueError, zipfile.BadZipFile, EOFError)
"""What numpy raises for a file that is no readable ``.npz``."""


def _inputs(specs, path: str | None) -> dict[str, np.ndarray]:
    if path is None:
        check_memory("the model's inputs", sum(s.nbytes for s in specs))
        rng = np.random.default_rng(0)
        return {s.name: s.random(rng) for s in specs}
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"--inputs {path!r}: no such file") from None
    except _NOT_NPZ as err:
        raise ValueError(f"--inputs {path!r}: not an .npz of arrays by name ({err})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):  # an .npy: one array, no name
        raise ValueError(
            f"--inputs {path!r}: one unnamed array; give an .npz of inputs by name "
            "(numpy.savez('in.npz', NAME=array, ...))"
        )
    try:  # members are read, and may be found damaged, only now
        with data:
            return {k: data[k] for k in data.files}
    except _NOT_NPZ as err:
        raise ValueError(f"--inputs {path!r}: not an .npz of arrays by name ({err})") from None


def save_outputs(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` itself (numpy would add ``.npz`` to another name), whole
    or not at all (a ``.partial`` file renamed)."""
    import os

    partial = f"{path}.partial"
    with open(partial, "wb") as f:
        np.savez(f, **arrays)
    os.replace(partial, path)


def _cluster_hosts(path: str) -> dict[str, str]:
    """``--cluster FILE``: the workers' addresses by device name."""
    from tvm_hetero.devices.cluster import ClusterSpec

    return {d.name: d.host for d in ClusterSpec.load(path).devices if d.host is not None}


def _at_hosts(deployment, hosts: dict[str, str] | None):
    """``deployment`` with its remote devices at the addresses ``--cluster`` gives (others kept)."""
    remote = {d.name for d in deployment.devices if d.host is not None}
    return deployment.with_hosts({n: h for n, h in (hosts or {}).items() if n in remote})


def _replan(deployment, failed: str, hosts: dict[str, str] | None, workdir: str, args):
    """``deployment`` compiled again, as it was, without device ``failed``: its ``--place``
    rules fall to the home device, strategies plan on the devices left. The recipe runs in
    the ``.tar``'s folder; a model file outside it (a ``.py`` or ``.pt2`` runs code) only with
    ``--trust-recipe``."""
    if not deployment.recipe:
        raise RunError(
            f"--replan: {deployment.model} was not made by tvm-hetero compile or optimize; "
            f"plan without {failed} by hand: tvm-hetero plan ... --exclude {failed}"
        )
    try:
        from tvm_hetero.cli import cmd_compile, cmd_optimize
        from tvm_hetero.cli.main import build_parser
    except ImportError as err:  # an edge box: the TVM runtime only
        raise RunError(f"--replan needs the compiler on this machine: {err}") from None
    from tvm_hetero.runtime.deployment import load

    folder = Path(args.file).resolve().parent
    recipe = deployment.recipe
    if "cwd" in recipe and not args.trust_recipe:  # made before .tars held relative paths
        raise RunError(
            f"--replan: {args.file} names its own folder to compile in ({recipe['cwd']!r}); "
            "add --trust-recipe if you made it, or compile again"
        )
    again = build_parser().parse_args(recipe["argv"])  # the compile, as the .tar was made
    model = folder / again.model
    if model.exists() and not model.resolve().is_relative_to(folder) and not args.trust_recipe:
        raise RunError(
            f"--replan: the recipe of {args.file} compiles {again.model!r}, outside the .tar's "
            f"folder {str(folder)!r}; add --trust-recipe to run it (only for a .tar you made)"
        )
    where = recipe.get("cwd", str(folder)) if args.trust_recipe else str(folder)
    again.argv = [*recipe["argv"], "--exclude", failed]
    again.exclude = [*again.exclude, failed]
    replanned = Path(workdir) / "replanned"  # not over the first libraries: they stay mapped
    replanned.mkdir()
    again.output = str(replanned / "model.tar")
    if again.command == "compile":
        again.place = [rule for rule in again.place if rule.partition("=")[2] != failed]
        again.check, again.explain = False, False
    else:  # optimize: search again on the devices left, writing nothing else
        again.report = again.plot = None
    console().print(f"[yellow]re-planning without {failed}:[/] tvm-hetero {' '.join(again.argv)}")
    with contextlib.chdir(where):
        (cmd_compile if again.command == "compile" else cmd_optimize).run(again)
    return _at_hosts(load(again.output, replanned), hosts)


SAMPLE_BYTES = 32
"""What one timed run holds until the statistics: a Python float (24 bytes) and its list slot."""


def run(args: argparse.Namespace) -> int:
    """Run once (with ``--replan``: again on the other devices if a worker fails), save
    outputs, optionally time and plot the measured timeline."""
    from tvm_hetero.runtime.deployment import load

    if args.print_time:  # each timed run keeps a sample: refused before the run, not at its end
        check_memory(f"--repeat {args.repeat} ({SAMPLE_BYTES} bytes a run)",
                     args.repeat * SAMPLE_BYTES)  # fmt: skip
    hosts = _cluster_hosts(args.cluster) if args.cluster else None
    with tempfile.TemporaryDirectory(prefix="tvm_hetero_") as workdir:
        deployment = _at_hosts(load(args.file, workdir), hosts)
        feed = _inputs(deployment.inputs, args.inputs)
        try:
            return _run(deployment, feed, args)
        except RunError as err:
            if not args.replan or err.device is None:
                raise
            console().print(f"[bold red]worker failed:[/] {err}")
            deployment = _replan(deployment, err.device, hosts, workdir, args)
            return _run(deployment, feed, args)


def _run(deployment, feed: dict[str, np.ndarray], args: argparse.Namespace) -> int:
    from tvm_hetero.runtime.executor import Executor

    if args.microbatches > 1:
        return _pipelined(deployment, feed, args)
    with Executor(deployment, timeout_s=args.timeout) as executor:
        outputs = executor.run(feed)
        timeline = executor.timeline
        devices = ", ".join(d.name for d in deployment.devices)
        console().print(
            f"ran {deployment.model} on {devices} ({len(deployment.units)} units, "
            f"{len(deployment.copies)} copies): outputs {[list(o.shape) for o in outputs]}"
        )
        if args.outputs:
            save_outputs(args.outputs, {f"output_{i}": o for i, o in enumerate(outputs)})
            console().print(f"wrote {args.outputs}")
        if args.print_time:
            with console().status(f"timing {args.repeat} runs"):
                stats = executor.time(feed, args.repeat)
                timeline = executor.timeline
            rows = [[stats.median_ms, stats.p99_ms, stats.p999_ms, stats.mean_ms, stats.std_ms,
                     len(stats.samples_ms)]]  # fmt: skip
            cols = ["p50", "p99", "p99.9", "mean", "std", "runs"]
            console().print(table("Latency (ms)", cols, rows))
    if len(deployment.devices) > 1:
        console().print(_devices_table(timeline, deployment))
    if args.plot:
        from tvm_hetero.viz.run_timeline import plot_run_timeline

        path = plot_run_timeline(timeline, f"{deployment.model}: measured run", Path(args.plot))
        console().print(f"wrote {path}")
    return 0


def _devices_table(timeline, deployment) -> Any:
    """Per device of a run's ``timeline``: its units, their time less their waits, what they
    waited for inputs, and how long the pieces it took from other devices were in flight
    (``Timeline.in_flight_s``: made to taken; the median and the longest)."""
    flights: dict[str, list[float]] = {}
    where = {e.step: e.worker for e in timeline.events if e.kind == "unit"}
    for (step, _), seconds in timeline.in_flight_s(deployment.steps).items():
        flights.setdefault(where[step], []).append(seconds * 1e3)
    rows = []
    for d in deployment.devices:
        units = sum(e.worker == d.name and e.kind == "unit" for e in timeline.events)
        late = flights.get(d.name, [])
        rows.append([d.name, units, timeline.busy_s(d.name) * 1e3,
                     timeline.waited_s(d.name) * 1e3, len(late),
                     float(np.median(late)) if late else "-", max(late, default="-")])  # fmt: skip
    cols = ["device", "units", "busy ms", "waited ms", "pieces", "in flight", "longest"]
    return table(f"Devices, last run of {timeline.total_s * 1e3:.2f} ms (pieces in ms)", cols, rows)


def _pipelined(deployment, feed: dict[str, np.ndarray], args: argparse.Namespace) -> int:
    """``--microbatches N``: N inputs in flight, each stage on the oldest it has input for;
    one warm-up batch, then ``--repeat`` timed batches (``--print-time``) or one."""
    from tvm_hetero.runtime.executor import Executor
    from tvm_hetero.runtime.stats import pipeline_stats

    count = args.microbatches
    per_batch = sum(s.nbytes for s in deployment.inputs)
    check_memory(f"--microbatches {count} (inputs of {per_batch:,} bytes each)", count * per_batch)
    rng = np.random.default_rng(1)
    feeds = [feed] + [
        feed if args.inputs else {s.name: s.random(rng) for s in deployment.inputs}
        for _ in range(count - 1)
    ]  # fmt: skip
    with Executor(deployment, timeout_s=args.timeout) as executor:
        batches = [executor.place_inputs(f) for f in feeds]
        results = executor.run_many(batches)  # warm-up, and the outputs
        outputs = [executor.outputs_of(r) for r in results]
        stats = []
        for _ in range(args.repeat if args.print_time else 1):
            executor.run_many(batches)
            stats.append(pipeline_stats(executor.timeline, executor.finished_s))
        timeline = executor.timeline
    best = sorted(stats, key=lambda s: s.total_s)[len(stats) // 2]  # the median batch
    names = [d.name for d in deployment.devices]
    console().print(
        f"ran {deployment.model} on {', '.join(names)}: {count} microbatches in flight, "
        f"{len(deployment.units)} stages"
    )
    latency = np.array(best.latency_s) * 1e3
    rows = [[count, best.total_s * 1e3, best.throughput, best.steady_s * 1e3,
             float(np.median(latency)), float(latency.max())]]  # fmt: skip
    cols = ["microbatches", "batch ms", "per s", "steady ms", "latency p50", "latency max"]
    console().print(table(f"Pipelined run (median of {len(stats)} batches)", cols, rows))
    rows = [
        [n, best.busy_s.get(n, 0.0) * 1e3, best.utilisation(n) * 100,
         best.waited_s.get(n, 0.0) * 1e3]
        for n in names
    ]  # fmt: skip
    console().print(table("Stages", ["device", "busy ms", "busy %", "input wait ms"], rows))
    if args.outputs:
        arrays = {
            f"mb{k}_output_{i}": o for k, out in enumerate(outputs) for i, o in enumerate(out)
        }
        save_outputs(args.outputs, arrays)
        console().print(f"wrote {args.outputs} (mbK_output_I: output I of microbatch K)")
    if args.plot:
        from tvm_hetero.viz.run_timeline import plot_run_timeline

        title = f"{deployment.model}: {count} microbatches pipelined"
        console().print(f"wrote {plot_run_timeline(timeline, title, Path(args.plot))}")
    return 0
