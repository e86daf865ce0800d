"""The GPU build path on models no one here wrote (compile-only: no GPU needed).

For each corpus model (torchvision, timm, transformers and PyTorch exports at their small size,
``benchmarks/models/zoo.py``; ``NAME-symbolic``: an ONNX file with a symbolic batch): compiled
for the GPU alone and for the CPU with the matmuls (and convolutions) on the GPU, saved, and
the saved libraries read back: which hold device code, for which archs; then EOP's offline
export for CPU + GPU (``--samples 3``), counting the workloads it writes. Any failure is kept
with its stage::

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python benchmarks/gpu/exported.py --out benchmarks/results/gpu_exported.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

from zoo import load_exported

from tvm_hetero import api
from tvm_hetero.build.cuda_binary import device_code
from tvm_hetero.devices import cpu_device, cuda_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.profiling.offline import OfflineRunner
from tvm_hetero.profiling.profiler import profiler_for
from tvm_hetero.strategies.eop import planner as eop

MODELS = ["resnet18", "mobilenet_v3_small", "googlenet", "deit_tiny", "bert", "gpt2",
          "lstm_classifier", "two_tower", "resnet18-symbolic"]  # fmt: skip


def _code(artifact: Path, work: Path) -> dict[str, list]:
    with tarfile.open(artifact) as tar:
        tar.extractall(work / artifact.stem, filter="data")
    return {p.name: device_code(p) for p in sorted((work / artifact.stem).glob("lib*.so"))}


def one(name: str, work: Path, eop_export: bool) -> dict:
    row: dict = {"model": name, "stage": "export"}
    try:
        model, _ = load_exported(name, work, row)
        cpu, gpu = cpu_device(), cuda_device(0)
        ops = {n.op for n in OpGraph.from_module(model.mod).nodes}
        heavy = {op: "cuda:0" for op in ("matmul", "nn.conv2d") if f"relax.{op}" in ops}
        row["stage"] = "gpu"
        start = time.perf_counter()
        alone = api.compile(model, [gpu]).save(work / f"{name}.gpu.tar")
        row["gpu_s"] = time.perf_counter() - start
        row["gpu_code"] = _code(alone, work)
        row["stage"] = "cpu+gpu"
        placement = api.placement_from_rules(model, [cpu, gpu], heavy)
        split = api.compile(model, [cpu, gpu], placement).save(work / f"{name}.split.tar")
        row["split_code"] = _code(split, work)
        row["placed_on_gpu"] = sorted(heavy)
        if eop_export:
            row["stage"] = "eop --offline"
            runner = OfflineRunner(work / f"eop_{name}")
            profiler = profiler_for(work / "db.jsonl", runner=runner)
            start = time.perf_counter()
            eop.measure_inputs(model, [cpu, gpu], profiler, key_share=1.0, samples=3)
            runner.save()
            row["eop_workloads"] = len(runner.entries)
            row["eop_export_s"] = time.perf_counter() - start
        row["stage"] = "done"
    except Exception as err:  # keep the failure and its stage, go on
        row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
        traceback.print_exc()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--eop", nargs="*", default=["lstm_classifier", "two_tower"],
                        help="models whose EOP workloads are exported too")  # fmt: skip
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            row = one(name, Path(tmp), name in args.eop)
            rows.append(row)
            codes = {f"{k}: {v}" for k, v in {**row.get("gpu_code", {}),
                                             **row.get("split_code", {})}.items() if v}  # fmt: skip
            print(
                f"{name:20} {row['stage']:14} {row.get('error', '')[:80]} "
                f"eop={row.get('eop_workloads', '-')} {sorted(codes)[:1]}",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
