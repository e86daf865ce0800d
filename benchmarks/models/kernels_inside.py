"""Where a corpus model's time goes inside the model, ours beside ONNX Runtime's (issue 56).

    .venv/bin/python benchmarks/models/kernels_inside.py MODEL [--threads 2] [--runs 20]
        [--top 25]

Compiles the model for the CPU as ``api.compile`` does and times every kernel call inside
whole runs (a VM instrument around each call: the medians of ``--runs`` runs, each call with
its argument shapes), then runs ONNX Runtime on the same file, inputs and threads with its
profiler on and takes each node's median. Prints our slowest kernels, ONNX Runtime's slowest
nodes and both totals by kind; nothing is written. A layer alone is timed with its weights and
output in cache, inside a model they are not: the 1x1 convolutions over MobileNet-V2's 7 x 7
and 14 x 14 maps were level with ONNX Runtime alone and 1.3-2.4x its time inside the model,
which this view showed. Kernel times include the instrument's call, a Python callback around
each kernel during which TVM's pool threads may go to sleep: a kernel of 100-300 us can read
up to twice its time in a whole run (RegNet-X-400MF's 1x1 400 -> 400 layers read 170 us here,
twice their time alone; its kernels summed 9.3 ms against 6.8 ms for the whole run in
``before_and_now.py``), and ONNX Runtime's profiler inflates its nodes too. The two runtimes are
timed one after the other, not interleaved: compare long kernels and shares, not small gaps,
and confirm a gap with the layer alone or ``before_and_now.py`` before acting on it.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]


def our_kernels(compiled, feeds: dict, runs: int) -> list[tuple[str, float, list]]:
    """``(kernel, median microseconds, argument shapes)`` of each kernel call, in call order."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from tvm_hetero.runtime.worker import use_threads

    use_threads(compiled.devices[0].threads or 1)
    vm = VirtualMachine(compiled.deployment.libraries[0], [tvm.cpu()])
    args = [tvm.runtime.tensor(feeds[i.name]) for i in compiled.model.inputs]
    order: list[str] = []
    samples: dict[int, list[float]] = collections.defaultdict(list)
    shapes: dict[int, list] = {}
    started: dict[str, float] = {}

    def instrument(_func, symbol, before, _ret, *call_args) -> int:
        if symbol.startswith("vm."):
            return 0
        if before:
            started[symbol] = time.perf_counter()
            return 0
        k = len(order)
        order.append(symbol)
        samples[k].append((time.perf_counter() - started[symbol]) * 1e6)
        shapes.setdefault(k, [tuple(a.shape) for a in call_args if hasattr(a, "shape")])
        return 0

    for _ in range(3):
        vm["main"](*args)
    vm.set_instrument(instrument)
    for _ in range(runs):
        order.clear()
        vm["main"](*args)
    return [(order[k], statistics.median(samples[k]), shapes[k]) for k in range(len(order))]


def their_nodes(path: Path, feeds: dict, threads: int, runs: int) -> list[tuple[str, float, str]]:
    """``(op type, median microseconds, output shape)`` of each ONNX Runtime node, in order."""
    import onnxruntime as ort

    from tvm_hetero.runtime.onnx_session import session_options

    with tempfile.TemporaryDirectory() as tmp:
        options = session_options(threads, 1)
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(runs + 3):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes: dict[str, list[float]] = collections.defaultdict(list)
    kinds: dict[str, tuple[str, str]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            nodes[e["name"]].append(e["dur"])
            shape = [next(iter(t.values())) for t in e["args"].get("output_type_shape", [])]
            kinds.setdefault(e["name"], (e["args"]["op_name"], str(shape[0] if shape else "")))
    return [(kinds[n][0], statistics.median(d), kinds[n][1]) for n, d in nodes.items()]


def main() -> int:
    from zoo import CORPUS, exported_feeds

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(CORPUS), metavar="MODEL")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{args.model}.onnx"
        given, feeds = exported_feeds(args.model, path)
        model = load_model(path, shapes=given)
        feeds = {i.name: feeds[i.name] for i in model.inputs}
        compiled = api.compile(model, [cpu_device(threads=args.threads)])
        ours = our_kernels(compiled, feeds, args.runs)
        theirs = their_nodes(path, feeds, args.threads, args.runs)
    print(f"{args.model}, {args.threads} threads: our kernels {sum(u for _, u, _ in ours):.0f} us "
          f"in {len(ours)} calls, ONNX Runtime's nodes {sum(u for _, u, _ in theirs):.0f} us in "
          f"{len(theirs)}")  # fmt: skip
    print(f"\nour slowest {args.top} kernel calls (us, kernel, argument shapes):")
    for name, us, shapes in sorted(ours, key=lambda r: -r[1])[: args.top]:
        print(f"{us:8.0f}  {name[:44]:44}  {' '.join('x'.join(map(str, s)) for s in shapes)[:60]}")
    print(f"\nONNX Runtime's slowest {args.top} nodes (us, op, output shape):")
    for op, us, shape in sorted(theirs, key=lambda r: -r[1])[: args.top]:
        print(f"{us:8.0f}  {op:20}  {shape}")
    totals: dict[str, float] = collections.defaultdict(float)
    for op, us, _ in theirs:
        totals[op] += us
    by_op = sorted(totals.items(), key=lambda kv: -kv[1])
    print("\nONNX Runtime by op (us): " + ", ".join(f"{k} {v:.0f}" for k, v in by_op))
    return 0


if __name__ == "__main__":
    sys.exit(main())
