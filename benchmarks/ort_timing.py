"""ONNX Runtime as the benchmarks run it: a CPU session of given threads, timed run by run."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnxruntime as ort


def cpu_session(path: str | Path, intra: int, inter: int = 1, parallel: bool = False):
    """An ``onnxruntime.InferenceSession`` on the CPU with ``intra`` / ``inter`` op threads
    (``parallel``: ``ORT_PARALLEL``, branches at once)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = intra, inter
    if parallel:
        opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def run_ms(session, feeds: dict[str, np.ndarray], runs: int, warmup: int = 3) -> list[float]:
    """Milliseconds of each of ``runs`` runs after ``warmup`` untimed ones."""
    for _ in range(warmup):
        session.run(None, feeds)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def median_seconds(session, feeds: dict[str, np.ndarray], repeat: int = 7,
                   min_repeat_ms: float = 50.0) -> float:  # fmt: skip
    """The median over ``repeat`` repeats of the mean run time, each repeat running for at
    least ``min_repeat_ms`` (as ``api.median_seconds`` times our builds)."""
    session.run(None, feeds)
    samples = []
    for _ in range(repeat):
        count, start = 0, time.perf_counter()
        while True:
            session.run(None, feeds)
            count += 1
            if (time.perf_counter() - start) * 1e3 >= min_repeat_ms:
                break
        samples.append((time.perf_counter() - start) / count)
    return float(np.median(samples))
