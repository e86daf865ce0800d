"""What the per-operator profiles of Lee et al. and EOP price a model at on one device, against
the model's run, with ONNX Runtime beside (issue 60: the planners price what the build runs).

    .venv/bin/python benchmarks/als/op_prices.py [MODEL ...] [--rounds 3] [--label now]

Lee et al.'s profiling runs and EOP's operator times build the model without fusion and time
each operator's kernels inside whole runs (``profiling.model_run.op_times_workload``); a
planner adds those times up to price a placement. Each model (a corpus name or an outside
form, as ``kernels_inside.py`` takes) is placed whole on the CPU (both threads), built that
way once and as the fused build once, and ONNX Runtime loads the same export; then in
interleaved rounds: one instrumented run of five (the operators' medians summed: the price of
the model on this device), the fused build's median of twenty, ONNX Runtime's median of
twenty. ``price / run`` is what the planners get wrong on one device before any placement.
``--label`` names the code measured (``before``: run with ``PYTHONPATH`` at the commit before
the unfused build took the fused build's rewrites). One JSON line per model in
``benchmarks/results/als_op_prices.jsonl``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "models"), str(HERE.parent / "cpu_kernels")]

MODELS = ("resnet18", "vgg11", "googlenet", "mnasnet1_0", "regnet_y_400mf", "bert", "wav2vec2")


def measured(name: str, rounds: int) -> dict:
    """One row: the model's price by its operators, its run and ONNX Runtime's (ms)."""
    import numpy as np
    import tvm
    from ort_timing import call_ms, cpu_session
    from tvm.runtime.vm import VirtualMachine
    from zoo import exported_feeds, onnx_path

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.profiling.model_run import op_times_workload
    from tvm_hetero.runtime.instrument import op_times
    from tvm_hetero.runtime.worker import use_threads

    device = cpu_device(threads=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = onnx_path(tmp, name)
        given, feeds = exported_feeds(name, path)
        model = load_model(path, shapes=given)
        args = [feeds[i.name] for i in model.inputs]
        work = op_times_workload(api.place(model, [device], api.Placement((device.name,))))
        fused = api.compile(model, [device])
        session = cpu_session(path, 2)
        their_feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
        use_threads(2)
        vm = VirtualMachine(fused.deployment.libraries[0], [tvm.cpu()])
        tensors = [tvm.runtime.tensor(a) for a in args]
        priced, ran, ort = [], [], []
        for _ in range(rounds):
            node_s, _ = op_times(work.executable, [tvm.cpu()], args, work.by_symbol, 5)
            priced.append(sum(node_s.values()) * 1e3)
            ran.append(statistics.median(call_ms(lambda: vm["main"](*tensors), 20)))
            ort.append(statistics.median(call_ms(lambda: session.run(None, their_feeds), 20)))
    row = {
        "model": name,
        "operators": len(node_s),
        "kernels": int(np.sum([len(v) for v in work.by_symbol.values()])),
    }
    return row | {
        "priced_ms": statistics.median(priced), "run_ms": statistics.median(ran),
        "ort_ms": statistics.median(ort), "priced_rounds_ms": priced, "run_rounds_ms": ran,
        "ort_rounds_ms": ort,
    }  # fmt: skip


def main() -> int:
    from onnx_models import append_rows
    from stamp import stamp
    from zoo import CORPUS, OUTSIDE_FORMS, outside

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", default=list(MODELS),
                        help=f"a corpus model, or {OUTSIDE_FORMS} (default: {' '.join(MODELS)})")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--label", default="now", help="the code measured (before, now)")
    args = parser.parse_args()
    unknown = [m for m in map(outside, args.models) if m not in CORPUS]
    if unknown:
        parser.error(f"argument MODEL: {unknown[0]!r} is not in the corpus ({OUTSIDE_FORMS} "
                     "for one outside it)")  # fmt: skip
    if args.rounds < 1:
        parser.error(f"argument --rounds: {args.rounds} is not a positive count")
    print(f"{'model':24s} {'price ms':>9s} {'run ms':>8s} {'ORT ms':>8s} {'price/run':>9s}")
    for name in args.models:
        row = measured(name, args.rounds) | {"label": args.label} | stamp()
        print(f"{name[:24]:24s} {row['priced_ms']:9.2f} {row['run_ms']:8.2f} "
              f"{row['ort_ms']:8.2f} {row['priced_ms'] / row['run_ms']:8.2f}x", flush=True)  # fmt: skip
        append_rows([row], "als_op_prices.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
