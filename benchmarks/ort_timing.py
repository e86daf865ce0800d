"""ONNX Runtime as the benchmarks run it: a CPU session of given threads, timed run by run."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnxruntime as ort


def cpu_session(path: str | Path, intra: int, inter: int = 1, parallel: bool = False):
    """An ``onnxruntime.InferenceSession`` on the CPU with ``intra`` / ``inter`` op threads
    (``parallel``: ``ORT_PARALLEL``, branches at once)."""
    from tvm_hetero.runtime.onnx_session import session_options

    opts = session_options(intra, inter)  # threads stop spinning when a run ends
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


def median_seconds(session, feeds: dict[str, np.ndarray], config=None) -> float:
    """The median over ``config.repeat`` samples, each the mean of enough runs to last
    ``config.min_repeat_ms``: the sizing ``api.median_seconds`` gives our builds
    (``choose_number``), with the same ``MeasureConfig``."""
    from tvm_hetero.runtime.measure import MeasureConfig, choose_number

    config = config or MeasureConfig()
    session.run(None, feeds)  # warm-up
    start = time.perf_counter()
    session.run(None, feeds)
    number = choose_number(time.perf_counter() - start, config)
    samples = []
    for _ in range(config.repeat):
        start = time.perf_counter()
        for _ in range(number):
            session.run(None, feeds)
        samples.append((time.perf_counter() - start) / number)
    return float(np.median(samples))
