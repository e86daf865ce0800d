"""A program per worker against dataflow dispatch: what the runtime adds per crossing and per run.

    .venv/bin/python benchmarks/runtime/programs.py [--rounds 10] [--runs 100] [--remote]
        [--out benchmarks/results/runtime_programs.jsonl]

A chain of 64 tiny additions (``ir/workloads.chain_module``): placed alternately on two workers it
is 64 units and 63 crossings (each a unit, a hand-over and a wake-up), on one worker a single
unit. Per crossing = (alternating - one worker) / 63, and by the slope: (the chain of 128
alternating - the chain of 64 alternating) / 64, which leaves out what a run of two workers
costs more than a run of one whatever its length (a remote worker alone is asked from the
caller's thread, two from two client threads); per run = one pinned worker's run against
the same unit called in the caller's thread (an unpinned device runs inline). Local: ``cpu@0`` /
``cpu@1`` worker threads. ``--remote``: two ``tvm-hetero worker`` processes on loopback (runtime
library only), one core each. Each arrangement by programs run natively (local threads:
``runtime/native_programs.py``; remote workers: ``runtime/native_remote.py``), by programs in
Python (``Executor(native=False)``) and by dataflow (``Executor(programs=False)``), every one
in each of ``--rounds`` interleaved rounds;
medians over all runs. The native one-worker run is timed twice: with the caller's thread where
the scheduler puts it (on a two-core host, often on the worker's core: the two then take turns)
and held to a core the worker does not use (``caller apart``). ONNX Runtime runs the same 64
additions (one session, one thread) in the same rounds: what the peer takes for the whole chain
on one device. ``--remote`` also times, in each round, what the hardware charges for a crossing:
a C ping-pong of small messages between two processes on the workers' cores, each spinning on
its receive (``pingpong.c``, built with ``cc``), over one loopback connection carrying both
ways (as the program links do) and over two, one each way (as they did); and the alternating
chains natively with a program link each way (``program_links.BOTH_WAYS`` off in the client:
``native one-way links``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stamp import stamp

CHAIN = 64


def _ort_chain(size: int):
    """ONNX Runtime session of the same 64 additions of 1.0, one thread; ``run()`` per call."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        helper.make_node("Add", ["x" if i == 0 else f"h{i}", "one"], [f"h{i + 1}"])
        for i in range(CHAIN)
    ]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info(f"h{CHAIN}", TensorProto.FLOAT, [size])], [one],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    from tvm_hetero.runtime.onnx_session import session_options

    session = ort.InferenceSession(model.SerializeToString(), session_options(1))
    onnx.checker.check_model(model)
    x = {"x": np.zeros((size,), "float32")}
    return lambda: session.run(None, x)


def _pingpong(folder: Path):
    """``run(links)`` -> the median one-way microseconds of ``pingpong.c`` (80 bytes, cores 0
    and 1: the workers') over ``links`` connections (1: both ways on one, as program links
    are; 2: one each way, as they were), built into ``folder``; None where no C compiler
    builds it."""
    built = folder / "pingpong"
    done = subprocess.run(["cc", "-O2", "-o", str(built), str(Path(__file__).with_name(
        "pingpong.c"))], capture_output=True, check=False)  # fmt: skip
    if done.returncode != 0:
        return None
    return lambda links: float(subprocess.run(
        [str(built), "80", "9", "0", "1", str(links)], capture_output=True, text=True, check=True
    ).stdout)  # fmt: skip


def _alternating(model, names: tuple[str, str]):
    """``model``'s operators placed on the two devices ``names`` in turn, the first on the
    first."""
    from tvm_hetero.ir.opgraph import OpGraph
    from tvm_hetero.plan import Placement

    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    return Placement(names, {n: 1 for i, n in enumerate(ids) if i % 2})


def _start_workers(n: int) -> list[tuple[int, subprocess.Popen]]:
    """``n`` ``tvm-hetero worker`` processes (runtime library only), worker k on core k."""
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    out = []
    for core in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        args = ["worker", "--port", str(port), "--port-end", str(port + 1), "--cache-gb", "0"]
        proc = subprocess.Popen(
            ["taskset", "-c", str(core), sys.executable, "-m", "tvm_hetero.cli.main", *args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True, env=env,
        )  # fmt: skip
        assert "listening" in proc.stdout.readline()
        out.append((port, proc))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--remote", action="store_true")
    parser.add_argument(
        "--zoo",
        help="a zoo model instead of the chain (every other operator "
        "on the second worker; ONNX Runtime not run)",
    )
    parser.add_argument("--out", default="benchmarks/results/runtime_programs.jsonl")
    args = parser.parse_args()

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device, resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.ir.workloads import chain_module
    from tvm_hetero.runtime import program_links
    from tvm_hetero.runtime.executor import Executor
    from tvm_hetero.zoo import load_zoo_model

    model = load_zoo_model(args.zoo) if args.zoo else load_model(chain_module(CHAIN), name="chain")
    procs: list[subprocess.Popen] = []
    if args.remote:
        started = _start_workers(2)
        procs = [p for _, p in started]
        a, b = (
            dataclasses.replace(cpu_device(0), name=n, host=f"127.0.0.1:{port}", threads=1)
            for n, (port, _) in zip(("edge-a", "edge-b"), started, strict=True)
        )
        pair, alone = (a, b), (a,)
    else:
        pair, alone = (resolve_device("cpu@0"), resolve_device("cpu@1")), (resolve_device("cpu@1"),)
    names = tuple(d.name for d in pair)
    deployments = {
        "alternating": api.compile(model, list(pair), _alternating(model, names)).deployment,
        "one worker": api.compile(model, list(alone)).deployment,
        "inline": api.compile(model, [resolve_device("cpu")]).deployment,
    }
    if not args.zoo:  # twice as long: the slope leaves out what a run costs whatever its length
        longer = load_model(chain_module(2 * CHAIN), name="chain")
        placement = _alternating(longer, names)
        deployments["alternating long"] = api.compile(longer, list(pair), placement).deployment
    x = model.random_inputs() if args.zoo else {"x": np.zeros((8,), "float32")}
    ort_run = (lambda: None) if args.zoo else _ort_chain(8)
    crossings = len(deployments["alternating"].units) - 1
    samples: dict[str, list[float]] = {}
    modes = ("native", "programs", "dataflow")
    arrangements = [(k, m) for k in deployments if k != "inline" for m in modes]
    keys = [*arrangements, ("inline", "-")]
    apart = set(range(os.cpu_count() or 1)) - set(pair[1].cores or ())
    if not args.remote and apart:
        keys.append(("one worker", "native caller apart"))
    if args.remote:  # the program links as they were: a connection each way
        keys += [(k, "native one-way links") for k in deployments if k.startswith("alternating")]
    programs_seen = []
    scratch = tempfile.TemporaryDirectory()
    pingpong = _pingpong(Path(scratch.name)) if args.remote else None
    try:
        for r in range(args.rounds):
            for k, m in keys:  # each opened every round: a remote worker serves one session
                how = {"programs": m != "dataflow", "native": m.startswith("native")}
                program_links.BOTH_WAYS = not m.endswith("one-way links")
                with Executor(deployments[k], timeout_s=30, **how) as ex:
                    mask = os.sched_getaffinity(0)
                    if m.endswith("caller apart"):
                        os.sched_setaffinity(0, apart)  # this thread only
                    try:
                        stats = ex.time(x, repeat=args.runs, warmup=10)
                    finally:
                        os.sched_setaffinity(0, mask)
                    runner = type(ex._runner).__name__
                    if getattr(ex._runner, "not_native", None):  # a remote worker in Python
                        runner += " in Python"
                    programs_seen.append((k, m, runner))
                samples.setdefault(f"{k} {m}".strip(" -"), []).extend(stats.samples_ms)
            times = []
            for i in range(args.runs + 10):
                start = time.perf_counter()
                ort_run()
                if i >= 10:
                    times.append((time.perf_counter() - start) * 1e3)
            if not args.zoo:
                samples.setdefault("onnxruntime", []).extend(times)
            if pingpong is not None:
                samples.setdefault("c one way", []).append(pingpong(1) * 1e-3)
                samples.setdefault("c one way two links", []).append(pingpong(2) * 1e-3)
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
        assert ("alternating", "programs", "ProgramRunner in Python" if args.remote
                else "ProgramRunner") in programs_seen  # fmt: skip
        native = "ProgramRunner" if args.remote else "NativeRunner"  # remote: each worker's
        assert ("alternating", "native", native) in programs_seen
    finally:
        scratch.cleanup()
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
    us = {k: float(np.median(v)) * 1e3 for k, v in samples.items()}
    row = {
        "what": "runtime programs vs dataflow",
        "model": args.zoo or f"chain of {CHAIN} adds",
        "crossings": crossings,
        "where": "remote (loopback, 2 worker processes)" if args.remote else "local threads",
        **stamp(),  # host, date, commit, command
        "cores": os.cpu_count(),
        "rounds": args.rounds,
        "runs": args.runs,
        "median_us": us,
    }
    for mode in modes:
        row[f"per_crossing_us_{mode}"] = (us[f"alternating {mode}"] - us[f"one worker {mode}"]) / (
            CHAIN - 1
        )
        row[f"per_run_us_{mode}"] = us[f"one worker {mode}"] - us["inline"]
        if f"alternating long {mode}" in us:
            row[f"per_crossing_slope_us_{mode}"] = (
                us[f"alternating long {mode}"] - us[f"alternating {mode}"]
            ) / CHAIN
    if "one worker native caller apart" in us:
        row["per_run_us_native_caller_apart"] = us["one worker native caller apart"] - us["inline"]
    if "alternating native one-way links" in us:
        row["per_crossing_us_native_one_way_links"] = (
            us["alternating native one-way links"] - us["one worker native"]
        ) / (CHAIN - 1)
        row["per_crossing_slope_us_native_one_way_links"] = (
            us["alternating long native one-way links"] - us["alternating native one-way links"]
        ) / CHAIN
    if "c one way" in us:
        row["c_one_way_us"] = us["c one way"]
        row["c_one_way_two_links_us"] = us["c one way two links"]
    print(
        f"{row['model']}, {row['where']}, {row['host']}: medians over {args.rounds} x {args.runs} runs"
    )
    print(f"{'arrangement':32} {'median us':>10}")
    for k, v in us.items():
        print(f"{k:32} {v:10.1f}")
    for mode in modes:
        print(f"{mode:9}: {row[f'per_crossing_us_{mode}']:6.1f} us a crossing "
              f"({row.get(f'per_crossing_slope_us_{mode}', float('nan')):.1f} by the slope), "
              f"{row[f'per_run_us_{mode}']:6.1f} us a run on one worker beyond inline")  # fmt: skip
    if "per_crossing_us_native_one_way_links" in row:
        print(f"native, a link each way (as before): "
              f"{row['per_crossing_us_native_one_way_links']:6.1f} us a crossing "
              f"({row['per_crossing_slope_us_native_one_way_links']:.1f} by the slope)")  # fmt: skip
    if "per_run_us_native_caller_apart" in row:
        print(
            f"native, the caller on a core of its own: "
            f"{row['per_run_us_native_caller_apart']:6.1f} us a run beyond inline"
        )
    with open(args.out, "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
