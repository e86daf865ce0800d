"""Compile time of exported models: kernels of constants folded by TVM's ``FoldConstant`` alone
(a build each) and by ``FoldConstantKernels`` first (all of them in one build), with ONNX
Runtime's session creation on the same file beside.

    .venv/bin/python benchmarks/models/compile_time.py [--only resnet18 bert ...] [--rounds 2]

Each model of ``zoo.CORPUS`` named is exported to ONNX and, in a process of its own, imported
once, compiled once to warm what a first compile caches (the 3x3 convolutions' timed choices),
then compiled ``--rounds`` times each way, the two ways interleaved (which goes first alternates
by round), and its ONNX Runtime
session created as many times (all optimisations, the same threads); the medians are kept.
Appends a line per model to ``benchmarks/results/compile_time.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results" / "compile_time.jsonl"
sys.path.insert(0, str(HERE.parent))
from stamp import stamp  # noqa: E402

MODELS = ("resnet18", "mobilenet_v2", "inception_v3", "swin_t", "vit_b_16", "bert", "gpt2",
          "lstm_classifier", "whisper_encoder")  # fmt: skip


def measure(name: str, work: Path, rounds: int, threads: int) -> dict:
    """One model's row (in this process)."""
    import tvm

    from tvm_hetero import api, pipelines
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model

    sys.path[:0] = [str(HERE), str(HERE.parent)]
    from ort_timing import cpu_session
    from zoo import CORPUS, exported_feeds, onnx_path

    path = onnx_path(work, name)
    given, _ = exported_feeds(name, path, False)
    model = load_model(path, shapes=given)
    device = [cpu_device(threads=threads)]
    ours = pipelines.PASSES["FoldConstantKernels"]

    def compile_s(fold_first: bool) -> float:
        pipelines.PASSES["FoldConstantKernels"] = (
            ours if fold_first else (lambda: tvm.transform.Sequential([]))
        )
        start = time.perf_counter()
        api.compile(model, device)
        return time.perf_counter() - start

    compile_s(True)  # warm: the 3x3 choices timed once per machine, caches filled
    before, now, ort = [], [], []
    for k in range(rounds):  # the order alternates: a second compile in a process ran slower
        for fold_first in (False, True) if k % 2 == 0 else (True, False):
            (now if fold_first else before).append(compile_s(fold_first))
        start = time.perf_counter()
        cpu_session(path, threads)
        ort.append(time.perf_counter() - start)
    return {"model": name, "source": CORPUS[name].source, "rounds": rounds,
            "before_s": statistics.median(before), "now_s": statistics.median(now),
            "ort_s": statistics.median(ort)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="+", default=list(MODELS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory() as work:
            print(json.dumps(measure(args.child, Path(work), args.rounds, args.threads)))
        return
    where = stamp()
    for name in args.only:
        argv = [sys.executable, __file__, "--child", name, "--rounds", str(args.rounds),
                "--threads", str(args.threads)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            print(f"{name}: failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
            continue
        row = {**json.loads(done.stdout.strip().splitlines()[-1]), **where}
        print(f"{name}: TVM's folding {row['before_s']:.1f} s, ours first {row['now_s']:.1f} s, "
              f"ONNX Runtime's session {row['ort_s']:.2f} s")  # fmt: skip
        with RESULTS.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
