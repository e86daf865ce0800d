"""EdgePipe on models no one here wrote: torchvision, timm and transformers exports, ONNX files.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python benchmarks/edgepipe/exported.py [--only resnet18 bert ...] [--microbatches 6]

Each model of the corpus (``benchmarks/models/zoo.py``: random weights, no downloads) is
exported to ONNX at its small size, loaded, cut into layers (``pipeline_layers``: the points
where a single tensor crosses), planned by EdgePipe on two CPU devices of this process
(``cpu@0``, ``cpu@1``, one thread each, layer times measured), compiled stage by stage and run
pipelined; every microbatch's outputs are compared with the single-device build's (relative
error: the largest difference over the largest output). ``resnet18-symbolic`` is ResNet-18
exported with a symbolic batch dimension, loaded with ``--shapes``' Python form. Throughput
is the pipeline's steady rate against one device's (``cpu@0``) and against ONNX Runtime on the
same file with both cores (2 threads, the microbatches one after another), measured in the same
interleaved rounds (medians of 3) on this shared 2-core machine.
Results: ``benchmarks/results/edgepipe_exported.json`` (each row stamped: ``--only`` re-measures
some and keeps the rest).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
MODELS = ("resnet18", "resnet18-symbolic", "mobilenet_v2", "densenet121", "googlenet",
          "convnext_tiny", "deit_tiny", "vit_b_16", "bert", "gpt2", "t5_encoder",
          "lstm_classifier")  # fmt: skip
TOLERANCE = 1e-4


def check(name: str, work: Path, microbatches: int) -> dict:
    """One model through EdgePipe; the row of the table (``stage`` names the first failure)."""
    from ort_timing import cpu_session
    from throughput import batch_rates
    from zoo import CORPUS, load_exported, random_feeds

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.ir.opgraph import OpGraph
    from tvm_hetero.runtime.executor import Executor
    from tvm_hetero.strategies.edgepipe import planner as strategy

    source = CORPUS[name.removesuffix("-symbolic")].source
    row: dict = {"model": name, "source": source, "stage": "export"}
    try:
        model, args = load_exported(name, work, row)
        graph = OpGraph.from_module(model.mod)
        row["stage"] = "plan"
        devices = [resolve_device("cpu@0"), resolve_device("cpu@1")]
        start = time.perf_counter()
        result = strategy.plan_with_measurements(model, devices, db=work / "profiles.jsonl")
        row.update(operators=len(graph.nodes), layers=len(result.layers),
                   plan_s=time.perf_counter() - start,
                   stages=[list(r) for r in result.plan.layers],
                   predicted_per_s=1 / result.partition.period_s)  # fmt: skip
        row["stage"] = "compile"
        compiled = api.compile(model, api.in_plan_order(devices, result.plan), result.plan)
        single = api.compile(model, devices[:1])
        row["stage"] = "match"
        feeds = random_feeds(model, args, microbatches)
        with Executor(single.deployment) as one, Executor(compiled.deployment) as ex:
            want = [one.run(f) for f in feeds]
            batches = {"pipelined_per_s": (ex, [ex.place_inputs(f) for f in feeds]),
                       "single_per_s": (one, [one.place_inputs(f) for f in feeds])}  # fmt: skip
            got = [ex.outputs_of(r) for r in ex.run_many(batches["pipelined_per_s"][1])]
            row["rel_err"] = max(
                api.max_abs_error(g, w) / (max(float(np.abs(x).max()) for x in w) or 1.0)
                for g, w in zip(got, want, strict=True)
            )  # fmt: skip
            if row["rel_err"] > TOLERANCE:
                return row
            row["stage"] = "time"
            session = cpu_session(work / f"{name}.onnx", 2)
            rates: dict[str, list[float]] = {k: [] for k in (*batches, "ort_per_s")}
            for _ in range(3):
                for key, (executor, placed) in batches.items():
                    rates[key].append(batch_rates(executor, placed)[0])
                rates["ort_per_s"].append(_ort_rate(session, feeds))
        row.update({k: statistics.median(v) for k, v in rates.items()})
        row["stage"] = "ok"
    except Exception as err:
        text = str(err).strip().splitlines()
        row["error"] = f"{type(err).__name__}: {text[0] if text else ''}"[:160]
    return row


def _ort_rate(session, feeds: list[dict]) -> float:
    """Microbatches per second of ONNX Runtime running ``feeds`` one after another."""
    session.run(None, feeds[0])
    start = time.perf_counter()
    for f in feeds:
        session.run(None, f)
    return len(feeds) / (time.perf_counter() - start)


def table(rows: list[dict]) -> str:
    """The Markdown table and its summary line."""
    lines = ["| model | source | result | ops | layers | stages (layers) | rel. error "
             "| pipelined /s | one device /s | ONNX Runtime /s | speed-up | vs ORT |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        result = "ok" if r["stage"] == "ok" else f"fails at {r['stage']}: {r.get('error', '')}"
        stages = " / ".join(f"{b - a + 1}" for a, b in r.get("stages", []))
        speed = r["pipelined_per_s"] / r["single_per_s"] if "single_per_s" in r else None
        cells = [r.get("operators", ""), r.get("layers", ""), stages,
                 f"{r['rel_err']:.1e}" if "rel_err" in r else "",
                 f"{r['pipelined_per_s']:.1f}" if "pipelined_per_s" in r else "",
                 f"{r['single_per_s']:.1f}" if "single_per_s" in r else "",
                 f"{r['ort_per_s']:.1f}" if "ort_per_s" in r else "",
                 f"{speed:.2f}x" if speed else "",
                 f"{r['pipelined_per_s'] / r['ort_per_s']:.2f}x" if "ort_per_s" in r else ""]  # fmt: skip
        lines.append(f"| {r['model']} | {r['source']} | {result} | "
                     + " | ".join(map(str, cells)) + " |")  # fmt: skip
    ok = sum(r["stage"] == "ok" for r in rows)
    return "\n".join(lines) + f"\n\n{ok} of {len(rows)} models planned, pipelined and matched.\n"


def main() -> None:
    sys.path[:0] = [str(HERE), str(HERE.parent / "models"), str(HERE.parent)]
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--microbatches", type=int, default=6)
    parser.add_argument("--out", default=str(RESULTS / "edgepipe_exported.json"))
    args = parser.parse_args()
    from stamp import stamp

    out = Path(args.out)
    rows = {r["model"]: r for r in json.loads(out.read_text())} if out.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            rows[name] = {**check(name, Path(tmp), args.microbatches), **stamp()}
            r = rows[name]
            print(f"{name}: {r['stage']} {r.get('error', '')}"
                  f"{r.get('stages', '')} {r.get('rel_err', '')}", flush=True)  # fmt: skip
    ordered = [rows[n] for n in MODELS if n in rows]
    out.write_text(json.dumps(ordered, indent=1) + "\n")
    print(table(ordered))


if __name__ == "__main__":
    main()
