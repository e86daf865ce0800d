"""The concurrent runtime on models no one here wrote: torchvision and timm exports (random weights).

    .venv/bin/pip install torchvision timm     # not dependencies of tvm-hetero
    .venv/bin/python benchmarks/runtime/real_models.py [--models resnet18 ...] [--rounds 5]
        [--out FILE.json]

Each model is exported by ``torch.onnx.export`` and compiled four ways: on ``cpu`` (one worker,
both cores), on ``cpu@0`` (one worker, one core), with every other operator on a second one-core
worker (``cpu@0`` + ``cpu@1``: the most units and handoffs a placement can make), and with the
convolutions and matmuls on ``cpu@1`` (the rest on ``cpu@0``). Each is checked against the
single-device build, then the four and ONNX Runtime on the same export (both cores, as ``cpu``)
are timed in ``--rounds`` interleaved rounds (each the median of several runs; the median of
the rounds is kept). The alternating build against ``cpu@0``, over its units less one, is what
a crossing between the workers costs on a real model (each unit runs on one core either way);
the time between its steps in the runtime's timeline (``gaps_ms``) is the runtime's own share
of it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import torch

from tvm_hetero import api
from tvm_hetero.devices import resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan import Placement
from tvm_hetero.runtime.executor import Executor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ort_timing import cpu_session, interleaved_ms
from ort_timing import median_seconds as ort_median_seconds
from stamp import stamp

MODELS = {
    "resnet18": ("torchvision", "resnet18", (1, 3, 112, 112)),
    "mobilenet_v3_small": ("torchvision", "mobilenet_v3_small", (1, 3, 112, 112)),
    "squeezenet1_1": ("torchvision", "squeezenet1_1", (1, 3, 112, 112)),
    "deit_tiny": ("timm", "deit_tiny_patch16_224", (1, 3, 224, 224)),
}


def export(name: str, out: Path) -> Path:
    """``MODELS[name]`` with random weights as ONNX (input ``x``)."""
    source, arch, shape = MODELS[name]
    torch.manual_seed(0)
    if source == "torchvision":
        import torchvision

        module = getattr(torchvision.models, arch)(weights=None)
    else:
        import timm

        module = timm.create_model(arch, pretrained=False)
    path = out / f"{name}.onnx"
    torch.onnx.export(
        module.eval(), (torch.randn(*shape),), str(path), input_names=["x"], dynamo=False
    )
    return path


def seconds_of(executor: Executor, inputs, repeat: int = 20) -> Callable[[], float]:
    """A timer (seconds) of ``executor``'s runs: the median of ``repeat``."""
    return lambda: executor.time(inputs, repeat=repeat, warmup=3).median_ms / 1e3


def gaps_ms(executor: Executor, inputs, runs: int = 10) -> float:
    """The median over ``runs`` of a run's time between its steps (from one step's end to the
    next step's start, on any worker): the runtime's own share of the crossings."""
    totals = []
    for _ in range(runs):
        executor.run(inputs)
        events = sorted(executor.timeline.events, key=lambda e: e.start_s)
        totals.append(sum(max(0.0, b.start_s - a.end_s) for a, b in itertools.pairwise(events)))
    return statistics.median(totals) * 1e3


def one(name: str, work: Path, rounds: int) -> dict:
    path = export(name, work)
    model = load_model(str(path))
    cpu, c0, c1 = (resolve_device(d) for d in ("cpu", "cpu@0", "cpu@1"))
    x = model.random_inputs()
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    present = {n.op.removeprefix("relax.") for n in OpGraph.from_module(model.mod).nodes}
    rules = {op: "cpu@1" for op in ("nn.conv2d", "matmul") if op in present}
    heavy = api.placement_from_rules(model, [c0, c1], rules)
    builds = {
        "cpu": api.compile(model, [cpu]),
        "cpu@0": api.compile(model, [c0]),
        "alternating": api.compile(
            model, [c0, c1], Placement(("cpu@0", "cpu@1"), {n: 1 for n in ids[1::2]})
        ),
        "heavy on cpu@1": api.compile(model, [c0, c1], heavy),
    }
    ref = api.run(builds["cpu"], x)
    row = {"operators": len(ids)}
    scale = max(float(np.abs(r).max()) for r in ref) or 1.0
    session = cpu_session(path, intra=2)
    feeds = {i.name: v for i, v in zip(session.get_inputs(), x.values(), strict=True)}
    with ExitStack() as stack:
        timers = {"ort": lambda: ort_median_seconds(session, feeds)}
        executors: dict[str, Executor] = {}
        for label, compiled in builds.items():
            row[label] = {
                "units": len(compiled.deployment.units),
                "rel_err": api.max_abs_error(api.run(compiled, x), ref) / scale,
            }
            executors[label] = stack.enter_context(Executor(compiled.deployment))
            timers[label] = seconds_of(executors[label], x)
        times = interleaved_ms(timers, rounds)
        row["alternating"]["gaps_ms"] = gaps_ms(executors["alternating"], x)
    for label in builds:
        row[label]["ms"] = times[label]
    row["ort_ms"] = times["ort"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/runtime_real_models.json")
    args = parser.parse_args()
    results: dict = {"meta": stamp()}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            start = time.perf_counter()
            try:
                results[name] = one(name, Path(tmp), args.rounds)
            except Exception as err:  # a model that fails is a finding, not the end of the run
                results[name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[-1]}"}
            results[name]["seconds"] = time.perf_counter() - start
            print(name, json.dumps(results[name]), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
