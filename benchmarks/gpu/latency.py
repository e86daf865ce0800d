"""Time compiled models on this machine with the TVM runtime alone (run on the GPU box).

For each ``.tar``: load it, run it on seeded random inputs (the same as ``tvm-hetero run``'s);
then ``--rounds`` rounds of ``--repeat`` runs of every artifact in turn (a slow spell of the
box hits them all), and one JSON line each (p50: the median of its rounds' medians, p99 of all
runs, devices, units, copies a run moves, whether a run after the timing still gives the first
run's outputs, and that run's timeline in microseconds) to ``--out``; the outputs go to
``--outputs-dir`` as ``NAME.npz`` so they can be compared with a CPU build where the compiler
is. ``--hand-over-too``: each artifact that spans
several devices is timed a second time, in the same rounds, with every unit handed to its
worker's thread (``Executor(on_spot=False)``, the runtime before 2026-11-27). Imports only
tvm-hetero's runtime::

    PYTHONPATH=box/site TVM_USE_RUNTIME_LIB=1 python3 benchmarks/gpu/latency.py A.tar B.tar \\
        --out $OUT/latency.jsonl --outputs-dir $OUT/outputs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Loaded:
    """One artifact, loaded and running on its executor, with the inputs it is timed on."""

    path: Path
    deployment: Any
    executor: Any
    inputs: dict
    load_s: float
    on_spot: bool = True
    first: list = field(default_factory=list)  # the outputs of its first run
    samples_ms: list = field(default_factory=list)
    round_ms: list = field(default_factory=list)


def load_one(
    path: Path, inputs_dir: Path | None, stack: ExitStack, on_spot: bool = True
) -> Loaded:  # fmt: skip
    """Load ``path`` (libraries unpacked into a folder ``stack`` removes) and start it."""
    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import Executor

    tmp = stack.enter_context(tempfile.TemporaryDirectory())
    start = time.perf_counter()
    deployment = load(path, tmp)
    load_s = time.perf_counter() - start
    given = inputs_dir / f"{path.stem.split('.')[0]}.inputs.npz" if inputs_dir else None
    if given is not None and given.is_file():  # the inputs torch_ref.py saved
        with np.load(given) as data:
            inputs = {k: data[k] for k in data.files}
    else:
        rng = np.random.default_rng(0)
        inputs = {s.name: s.random(rng) for s in deployment.inputs}
    executor = stack.enter_context(Executor(deployment, on_spot=on_spot))
    return Loaded(path, deployment, executor, inputs, load_s, on_spot)


def started(
    path: Path, inputs_dir: Path | None, stack: ExitStack, warmup: int, on_spot: bool = True
) -> Loaded:  # fmt: skip
    """:func:`load_one`, run once (its outputs kept: a run after the timing must give them
    again) and warmed up."""
    one = load_one(path, inputs_dir, stack, on_spot)
    one.first = one.executor.run(one.inputs)
    one.executor.time(one.inputs, repeat=1, warmup=warmup)
    return one


def row(one: Loaded, repeat: int) -> dict:
    """The artifact's JSON line: p50 is the median of the rounds' medians; it runs the
    artifact once more, for its outputs and its timeline."""
    import tvm

    d = one.deployment
    after = one.executor.run(one.inputs)
    return {
        "artifact": one.path.name, "model": d.model, "tvm": tvm.__version__,
        "on_spot": one.on_spot,
        "devices": [s.name for s in d.devices], "units": len(d.units),
        "copies_per_run": len(d.copies), "copy_bytes_per_run": sum(s.nbytes for s in d.copies),
        "same_outputs_after_timing": all(
            np.array_equal(a, b) for a, b in zip(one.first, after, strict=True)
        ),
        "last_run_us": [(e.step, e.worker, e.kind, round(e.start_s * 1e6, 1),
                         round(e.end_s * 1e6, 1)) for e in one.executor.timeline.events],
        "p50_ms": float(np.median(one.round_ms)), "p99_ms": float(np.percentile(one.samples_ms, 99)),
        "round_p50_ms": one.round_ms, "runs": repeat * len(one.round_ms), "load_s": one.load_s,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--outputs-dir", type=Path)
    parser.add_argument("--inputs-dir", type=Path, help="NAME.inputs.npz per artifact NAME.*.tar")
    parser.add_argument("--repeat", type=int, default=200, help="runs per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over every artifact")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--hand-over-too",
        action="store_true",
        help="multi-device artifacts also timed with every unit handed over",
    )
    args = parser.parse_args()
    failed, loaded = 0, []
    with ExitStack() as stack, open(args.out, "a") as out:
        for path in args.artifacts:
            try:
                one = started(path, args.inputs_dir, stack, args.warmup)
                spans = len({s.device for s in one.deployment.units}) > 1
                handed = []
                if args.hand_over_too and spans:
                    handed.append(started(path, args.inputs_dir, stack, args.warmup, False))
            except Exception as err:  # report it and go on with the others
                failed += 1
                error = {"artifact": path.name, "error": f"{type(err).__name__}: {err}"}
                traceback.print_exc()
                print(json.dumps(error), flush=True)
                out.write(json.dumps(error) + "\n")
                continue
            if args.outputs_dir is not None:
                args.outputs_dir.mkdir(parents=True, exist_ok=True)
                np.savez(args.outputs_dir / f"{path.stem}.npz", *one.first)
            loaded += [one, *handed]
        for _ in range(args.rounds):  # interleaved: a slow spell of the box hits every artifact
            for one in loaded:
                stats = one.executor.time(one.inputs, repeat=args.repeat, warmup=2)
                one.samples_ms.extend(stats.samples_ms)
                one.round_ms.append(stats.median_ms)
        for one in loaded:
            line = json.dumps(row(one, args.repeat))
            print(line, flush=True)
            out.write(line + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
