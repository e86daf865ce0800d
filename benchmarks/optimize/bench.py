"""``optimize`` on this machine: what it chose against every candidate it timed, the best single
device and ONNX Runtime on one device, all measured in the same interleaved rounds (issue 55).

    .venv/bin/python benchmarks/optimize/bench.py [--models siamese-lstm bert-small ...]
        [--budget 5] [--runs 50] [--once] [--cluster SPEC-UP.json] [--steps FILE]
        [--objective latency|throughput] [--out benchmarks/results/optimize.jsonl]

Models: the demo's ONNX files (``tvm_hetero.zoo.onnx_files``: the Siamese LSTM over 16 steps,
BERT-small); any model of the corpus of models no one here wrote (``benchmarks/models/zoo.py``,
exported to ONNX at its small size; ``NAME-symbolic`` exported with a symbolic batch, given as
1); and ``zoo:NAME``, a zoo model at its paper size (ONNX Runtime runs its torch twin,
``benchmarks/torch_twins.py``: the same layers and shapes, its own random weights; a model with
no twin, such as the ViTs, has no ONNX Runtime line). On two one-core CPU workers (``cpu@0``,
``cpu@1``), or on a running emulated cluster (``--cluster``: the ``-up.json`` file ``tvm-hetero
cluster up`` wrote for a spec of ``clusters.py``). Each model is optimized twice: with an empty
profile database (its time is ``optimize``'s own cost on a new model) and again with the
database warm (``--once``: empty only). One JSON line per run: host, model, every candidate
(predicted, p50, p99, status), the kept one, its ratio to the fastest candidate timed, to the
best single device and to ONNX Runtime's best, and the most memory the search held.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tvm_hetero.strategies.base import Progress

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks" / "models"), str(ROOT / "benchmarks")]


def loaded(name: str, work: Path):
    """``(model, its ONNX file or None)``: a demo twin, a corpus export, or ``zoo:NAME``."""
    from tvm_hetero.frontends import load_model
    from tvm_hetero.zoo.onnx_files import ONNX_MODELS, write_onnx

    if name.startswith("zoo:"):
        from torch_twins import TWINS, onnx_twin

        spec = name.removeprefix("zoo:")
        if spec.split(":")[0] not in TWINS:
            return load_model(spec), None
        twin, _ = onnx_twin(spec, work)  # ONNX Runtime's model: same layers, its own weights
        return load_model(spec), str(twin)
    if name in ONNX_MODELS:
        path = str(write_onnx(name, work / f"{name}.onnx"))
        return load_model(path, name=name), path
    import zoo

    model, _ = zoo.load_exported(name, work, {})
    return model, str(work / f"{name}.onnx")


def row(result, name: str, run: str, seconds: float) -> dict:
    """One JSON line of a search."""
    ours = [e for e in result.entries if e.samples_s and e.kind != "peer"]
    fastest = min(e.p50_s for e in ours)
    single, peer = result.best("single"), result.best("peer")
    return {
        "model": name, "run": run, "search_s": round(seconds, 1),
        "phases_s": {k: round(v, 1) for k, v in result.phases.items()},
        "cut": result.cut,
        "kept": result.kept.name, "kept_p50_ms": result.kept.p50_s * 1e3,
        "kept_vs_fastest": result.kept.p50_s / fastest,
        "kept_vs_best_single": single.p50_s / result.kept.p50_s,
        "kept_vs_ort": None if peer is None else peer.p50_s / result.kept.p50_s,
        "candidates": [
            {"name": e.name, "predicted_ms": None if e.predicted_s is None else e.predicted_s * 1e3,
             "p50_ms": None if not e.samples_s else e.p50_s * 1e3,
             "p99_ms": None if not e.samples_s else e.p99_s * 1e3, "status": e.status}
            for e in result.entries
        ],
    }  # fmt: skip


class StepLog(Progress):
    """A search's progress as lines of a file: the second since the search began, the step
    (``done/total``) and what it is doing, and each line said to the user; where the budget
    went, step by step."""

    def __init__(self, path: str, start: float) -> None:
        self.path, self.start = path, start

    def write(self, text: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"{time.perf_counter() - self.start:8.1f}  {text}\n")

    def step(self, what: str, done: int, total: int | None) -> None:
        self.write(f"{done}/{total}  {what}")

    def say(self, text: str) -> None:
        self.write(f"said: {text}")


def peaks() -> dict:
    """The most memory this process has held resident so far, GiB (a child's own peak is not
    counted: the system charges a child the parent's pages it was forked with)."""
    import resource

    return {"peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["siamese-lstm", "bert-small"])
    parser.add_argument("--budget", type=float, default=5.0, help="minutes per search")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--once", action="store_true", help="an empty database only")
    parser.add_argument("--cluster", help="a running cluster's spec (default cpu@0 + cpu@1)")
    parser.add_argument("--objective", default="latency", choices=["latency", "throughput"])
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/optimize.jsonl"))
    parser.add_argument("--steps", help="write each progress step, with its second, to this file")
    args = parser.parse_args()
    from stamp import stamp

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.records import cpu_model

    settings: dict = {}
    if args.cluster:
        from tvm_hetero.devices import ClusterSpec

        settings["cluster"] = ClusterSpec.load(args.cluster)
        devices, where = list(settings["cluster"].devices), Path(args.cluster).stem
    else:
        devices, where = [resolve_device("cpu@0"), resolve_device("cpu@1")], "cpu@0 + cpu@1"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.models:
            model, path = loaded(name, work)
            db = work / f"{name.replace(':', '_')}.jsonl"
            for run in ("empty database", "warm database")[: 1 if args.once else 2]:
                start = time.perf_counter()
                steps = StepLog(args.steps, start) if args.steps else None
                result = api.optimize(model, devices, args.objective, args.budget * 60, steps,
                                      onnx=path, runs=args.runs, db=str(db), **settings)  # fmt: skip
                line = {**stamp(), "host": cpu_model(), "devices": where, "objective": args.objective,
                        **row(result, name, run, time.perf_counter() - start), **peaks()}  # fmt: skip
                with open(args.out, "a") as f:
                    f.write(json.dumps(line) + "\n")
                ort = line["kept_vs_ort"]
                print(f"{name} ({run}): kept {line['kept']} {line['kept_p50_ms']:.3f} ms, "
                      f"{line['kept_vs_best_single']:.2f}x best single, time / ORT "
                      f"{'-' if ort is None else f'{1 / ort:.2f}x'}, "
                      f"search {line['search_s']} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
