"""ONNX Runtime as the benchmarks run it: a CPU session of given threads, timed run by run, in
this process or in one held as an emulated device is (``held_run``)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort


def cpu_session(
    path: str | Path, intra: int, inter: int = 1, parallel: bool = False,
    entries: Mapping[str, str] | None = None,
):  # fmt: skip
    """An ``onnxruntime.InferenceSession`` on the CPU with ``intra`` / ``inter`` op threads
    (``parallel``: ``ORT_PARALLEL``, branches at once; ``entries``: session config entries
    besides ours, such as ``session.set_denormal_as_zero``)."""
    from tvm_hetero.runtime.onnx_session import session_options

    opts = session_options(intra, inter)  # threads stop spinning when a run ends
    if parallel:
        opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    for key, value in (entries or {}).items():
        opts.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def call_ms(call: Callable[[], object], runs: int, warmup: int = 3) -> list[float]:
    """Milliseconds of each of ``runs`` calls of ``call`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def run_ms(session, feeds: dict[str, np.ndarray], runs: int, warmup: int = 3) -> list[float]:
    """Milliseconds of each of ``runs`` runs after ``warmup`` untimed ones."""
    return call_ms(lambda: session.run(None, feeds), runs, warmup)


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


def interleaved_ms(timers: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each timer (seconds) run ``rounds`` times, every timer in turn a round so that no build
    or peer gains from running first: the median of its rounds, in milliseconds."""
    samples: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(rounds):
        for key, timer in timers.items():
            samples[key].append(timer() * 1e3)
    return {k: statistics.median(v) for k, v in samples.items()}


def twin_timer(
    spec: str, overrides: dict, devices: Sequence, config=None
) -> Callable[[], float] | None:
    """A timer (seconds, ``median_seconds``) of ONNX Runtime on the torch twin of zoo model
    ``spec`` (``benchmarks/torch_twins.py``) with as many threads as ``devices`` have cores
    (at most this machine's), or ``None`` where the model has no twin or torch is missing."""
    try:  # beside this module on the path, as every benchmark imports it
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


def child(path: str, runs: int) -> None:
    """In the held process: load, warm up, time ``runs`` runs; one JSON line of milliseconds.
    An ``.onnx`` file runs on ONNX Runtime (one thread), a compiled model on the TVM runtime."""
    if not path.endswith(".onnx"):
        from tvm_hetero.runtime.deployment import load
        from tvm_hetero.runtime.executor import run_seconds

        deployment = load(path, tempfile.mkdtemp())
        print(json.dumps([t * 1e3 for t in run_seconds(deployment, runs, warmup=3)]))
        return
    sess = cpu_session(path, intra=1)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (rng.integers(0, 1000, shape) if "int" in i.type
                         else rng.standard_normal(shape).astype(np.float32))  # fmt: skip
    samples = run_ms(sess, feeds, runs)
    print(json.dumps(samples))


def held_run(path: Path, quota: float, runs: int) -> list[float]:
    """``child`` in a process on core 0 under a CPU quota of ``quota`` cores."""
    from tvm_hetero.emulation import control

    cgroup = control.CGROUP_ROOT / "cpu" / "tvm-hetero-ort"
    cgroup.mkdir(exist_ok=True)
    period = control.cfs_period_us(quota)
    (cgroup / "cpu.cfs_period_us").write_text(str(period))
    (cgroup / "cpu.cfs_quota_us").write_text(str(round(quota * period)))
    hold = f'echo $$ > {cgroup / "tasks"} && exec taskset -c 0 "$0" "$@"'
    cmd = ["sh", "-c", hold, sys.executable, __file__, "--child", str(path), "--runs", str(runs)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True)
    finally:
        if cgroup.is_dir() and not (cgroup / "tasks").read_text().strip():
            cgroup.rmdir()  # the held process is gone
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # held_run's process: --child PATH --runs N
    child(sys.argv[sys.argv.index("--child") + 1], int(sys.argv[sys.argv.index("--runs") + 1]))
