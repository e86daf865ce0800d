"""Where a corpus model's time goes inside the model, ours beside ONNX Runtime's (issue 56).

    .venv/bin/python benchmarks/models/kernels_inside.py MODEL [MODEL ...] [--threads 2]
        [--runs 20] [--top 25]

(``MODEL``: a corpus model, or ``timm:NAME`` / ``hf:CLASS[:FIELD=VALUE,...]`` for one outside
it, :func:`zoo.outside`.)

Compiles each model for the CPU as ``api.compile`` does, records its kernel calls in one run
(a VM instrument: each call's kernel and the VM's own argument tensors) and times them without
the instrument: replayed in the model's order ``--runs`` times (each call reads what the one
before it wrote, where it wrote it: the time it takes inside the model), and each alone as
often (its operands stay in cache between runs), the medians of each; and the whole VM run.
Then ONNX Runtime on the same file, inputs and threads: with its profiler on, each node's
median, and without, the whole run's. Prints the totals, our slowest kernel calls in the
model's order beside their time alone, ONNX Runtime's slowest nodes and its totals by kind;
one JSON line of totals per model in ``benchmarks/results/kernels_inside.jsonl``.

The replay sums to the whole VM run within a few percent, so the gap between a kernel in the
model's order and alone is what running inside the model costs it: on two threads
MobileNet-V2's kernels alone summed below ONNX Runtime's whole run, and in the model's order
half as much again, most of it in the 1x1 convolutions after depthwise layers, whose threads
each read a band of positions that the depthwise layer's threads wrote a block of channels of,
half of it in the other core's cache. ONNX Runtime's profiler inflates its small nodes: compare
its whole run. The two runtimes are timed one after the other, not interleaved: compare
totals and long kernels, and confirm a gap with ``before_and_now.py`` before acting on it.
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
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "cpu_kernels")]


def recorded_calls(compiled, feeds: dict) -> tuple:
    """``(vm, args, calls)``: a VM over ``compiled``'s library on the threads its device names,
    its input tensors, and each kernel call of one run as ``(kernel, function, arguments)`` in
    call order (a VM instrument's; the VM's own tensors, so a call replayed reads what the call
    before it wrote, where it wrote it)."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from tvm_hetero.runtime.worker import use_threads

    use_threads(compiled.devices[0].threads or 1)
    vm = VirtualMachine(compiled.deployment.libraries[0], [tvm.cpu()])
    args = [tvm.runtime.tensor(feeds[i.name]) for i in compiled.model.inputs]
    calls: list[tuple] = []

    def instrument(func, symbol, before, _ret, *call_args) -> int:
        if before and not symbol.startswith("vm."):
            calls.append((symbol, func, list(call_args)))
        return 0

    vm.set_instrument(instrument)
    vm["main"](*args)
    vm.set_instrument(None)
    return vm, args, calls


def our_kernels(compiled, feeds: dict, runs: int) -> tuple[list[tuple], float]:
    """``(kernel, median us in the model's order, median us alone, argument shapes)`` of each
    kernel call, in call order, and the whole VM run's median us.

    One run with a VM instrument records each call and its arguments (:func:`recorded_calls`);
    the calls are then replayed in order without the instrument ``runs`` times, each timed, and
    each alone ``runs`` times over (its operands then stay in cache)."""
    from ort_timing import call_ms

    vm, args, calls = recorded_calls(compiled, feeds)
    whole = call_ms(lambda: vm["main"](*args), runs)
    in_order: dict[int, list[float]] = collections.defaultdict(list)
    for run in range(runs + 3):
        for k, (_, func, call_args) in enumerate(calls):
            start = time.perf_counter()
            func(*call_args)
            if run >= 3:
                in_order[k].append((time.perf_counter() - start) * 1e6)
    rows = [
        (name, statistics.median(in_order[k]),
         statistics.median(call_ms(lambda f=func, a=call_args: f(*a), runs)) * 1e3,
         [tuple(a.shape) for a in call_args if hasattr(a, "shape")])
        for k, (name, func, call_args) in enumerate(calls)
    ]  # fmt: skip
    return rows, statistics.median(whole) * 1e3


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


def their_whole(path: Path, feeds: dict, threads: int, runs: int) -> float:
    """ONNX Runtime's median us a run on ``path`` without its profiler, timed as ours is."""
    from ort_timing import cpu_session, run_ms

    return statistics.median(run_ms(cpu_session(path, threads), feeds, runs)) * 1e3


def compiled_model(name: str, tmp: str, threads: int) -> tuple:
    """``(path, feeds, compiled)``: corpus model ``name`` exported as ``corpus.py`` exports it
    into the folder ``tmp``, loaded and compiled for the CPU with ``threads`` threads as
    ``api.compile`` does (:func:`compiled_export`), and its example inputs."""
    from zoo import exported_feeds, onnx_path

    path = onnx_path(tmp, name)
    given, feeds = exported_feeds(name, path)
    return (path, *compiled_export(path, given, feeds, threads))


def compiled_export(path: Path, given: dict | None, feeds: dict, threads: int) -> tuple:
    """``(feeds, compiled)``: the export at ``path`` (``given``: its symbolic batch's shapes,
    :func:`zoo.exported_feeds`) loaded and compiled for the CPU with ``threads`` threads, and
    the example inputs ``feeds`` it keeps."""
    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model

    model = load_model(path, shapes=given)
    feeds = {i.name: feeds[i.name] for i in model.inputs}
    return feeds, api.compile(model, [cpu_device(threads=threads)])


def main() -> int:
    from onnx_models import append_rows
    from stamp import stamp
    from zoo import CORPUS, OUTSIDE_FORMS, outside

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", metavar="MODEL",
                        help=f"a corpus model, or {OUTSIDE_FORMS} for one outside it")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    unknown = [m for m in map(outside, args.models) if m not in CORPUS]
    if unknown:
        parser.error(f"argument MODEL: {unknown[0]!r} is not in the corpus ({OUTSIDE_FORMS} "
                     "for one outside it)")  # fmt: skip

    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            path, feeds, compiled = compiled_model(name, tmp, args.threads)
            ours, whole = our_kernels(compiled, feeds, args.runs)
            theirs = their_nodes(path, feeds, args.threads, args.runs)
            their_run = their_whole(path, feeds, args.threads, args.runs)
        in_order, alone = sum(r[1] for r in ours), sum(r[2] for r in ours)
        print(f"{name}, {args.threads} threads: our {len(ours)} kernels {in_order:.0f} us in the "
              f"model's order, {alone:.0f} us each alone, whole run {whole:.0f} us; ONNX "
              f"Runtime's {len(theirs)} nodes {sum(u for _, u, _ in theirs):.0f} us (profiled), "
              f"whole run {their_run:.0f} us")  # fmt: skip
        print(f"\nour slowest {args.top} kernel calls in the model's order (us; alone; kernel; "
              "argument shapes):")  # fmt: skip
        for kernel, us, by_itself, shapes in sorted(ours, key=lambda r: -r[1])[: args.top]:
            said = " ".join("x".join(map(str, s)) for s in shapes)[:40]
            print(f"{us:6.0f} {by_itself:6.0f}  {kernel[:32]:32}  {said}")
        print(f"\nONNX Runtime's slowest {args.top} nodes (us, op, output shape):")
        for op, us, shape in sorted(theirs, key=lambda r: -r[1])[: args.top]:
            print(f"{us:8.0f}  {op:20}  {shape}")
        totals: dict[str, float] = collections.defaultdict(float)
        for op, us, _ in theirs:
            totals[op] += us
        by_op = sorted(totals.items(), key=lambda kv: -kv[1])
        print("\nONNX Runtime by op (us): " + ", ".join(f"{k} {v:.0f}" for k, v in by_op) + "\n")
        row = {**stamp(), "model": name, "threads": args.threads, "runs": args.runs,
               "kernels": len(ours), "in_order_us": in_order, "alone_us": alone,
               "whole_us": whole, "ort_nodes_us": sum(u for _, u, _ in theirs),
               "ort_whole_us": their_run}  # fmt: skip
        append_rows([row], "kernels_inside.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
