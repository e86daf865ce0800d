"""Corpus exports cut at every operator over two remote workers: native programs against Python.

    .venv/bin/python benchmarks/runtime/exported_remote.py MODEL [MODEL ...] [--runs 10]

A stress test of the remote runtime on models no one here wrote (``benchmarks/models/zoo.py``'s
corpus: torchvision, timm, transformers exports, symbolic batches), not a plan anyone would
keep: the operators are placed alternately on two ``tvm-hetero worker`` processes on loopback
(one core each, as ``programs.py --remote``), so every operator is a unit and nearly every
one a hand-over. Per model: the largest error against ONNX Runtime (relative to the output's
largest value), and medians of ``--runs`` runs of the whole model on one remote worker,
alternating by native programs and by Python programs (``Executor(native=False)``), with ONNX
Runtime on one thread in this process beside them. The ways run one after the other, not
interleaved; nothing is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "models"), str(HERE.parent)]


def main() -> int:
    from programs import _alternating, _start_workers
    from zoo import CORPUS, exported_feeds

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="+", choices=sorted(CORPUS), metavar="MODEL")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.runtime.executor import Executor
    from tvm_hetero.runtime.onnx_session import session_options

    started = _start_workers(2)
    try:
        a, b = (dataclasses.replace(cpu_device(0), name=n, host=f"127.0.0.1:{port}", threads=1)
                for n, (port, _) in zip(("edge-a", "edge-b"), started, strict=True))  # fmt: skip
        print(f"{'model':20} {'units':>5} {'error':>8} {'one worker':>10} {'native':>8} "
              f"{'Python':>8} {'ORT':>8}  (ms)")  # fmt: skip
        for name in args.models:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "model.onnx"
                shapes, feeds = exported_feeds(name, path)
                model = load_model(str(path), shapes=shapes) if shapes else load_model(str(path))
                inputs = {i.name: feeds[i.name] for i in model.inputs}
                session = ort.InferenceSession(str(path), session_options(1))
                theirs = {i.name: feeds[i.name] for i in session.get_inputs()}
                want = session.run(None, theirs)
                placement = _alternating(model, ("edge-a", "edge-b"))
                cut = api.compile(model, [a, b], placement).deployment
                whole = api.compile(model, [a]).deployment
                medians, error = [], 0.0
                for deployment, native in ((whole, True), (cut, True), (cut, False)):
                    with Executor(deployment, timeout_s=60, native=native) as ex:
                        for got, w in zip(ex.run(inputs), want, strict=True):
                            scale = float(np.abs(w).max()) or 1.0
                            error = max(error, float(np.abs(np.asarray(got) - w).max()) / scale)
                        stats = ex.time(inputs, repeat=args.runs, warmup=2)
                        medians.append(statistics.median(stats.samples_ms))
                ort_ms = []
                for _ in range(args.runs):
                    start = time.perf_counter()
                    session.run(None, theirs)
                    ort_ms.append((time.perf_counter() - start) * 1e3)
                print(f"{name:20} {len(cut.units):5d} {error:8.1e} "
                      + " ".join(f"{m:10.2f}" if k == 0 else f"{m:8.2f}"
                                 for k, m in enumerate(medians))
                      + f" {statistics.median(ort_ms):8.2f}", flush=True)  # fmt: skip
    finally:
        for _, proc in started:
            os.killpg(proc.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
