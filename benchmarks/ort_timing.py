"""ONNX Runtime as the benchmarks run it: a CPU session of given threads, timed run by run."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
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


def twin_timer(
    spec: str, overrides: dict, devices: Sequence, config=None
) -> Callable[[], float] | None:
    """A timer (seconds, ``median_seconds``) of ONNX Runtime on the torch twin of zoo model
    ``spec`` (``benchmarks/torch_twins.py``) with as many threads as ``devices`` have cores
    (at most this machine's), or ``None`` where the model has no twin or torch is missing."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from torch_twins import TWINS, onnx_twin
    except ImportError:
        return None
    if spec.split(":")[0] not in TWINS:
        return None
    cores = os.cpu_count() or 1
    threads = min(cores, sum(d.threads or cores for d in devices))
    with tempfile.TemporaryDirectory() as tmp:  # the session holds the model once created
        path, feeds = onnx_twin(spec, Path(tmp), **overrides)
        session = cpu_session(path, threads)
    return lambda: median_seconds(session, feeds, config)
