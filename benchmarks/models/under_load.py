"""Corpus models beside ONNX Runtime on a quiet host and with another process busy on one core
(issue 56): how much each runtime slows when it does not have its cores to itself.

    .venv/bin/python benchmarks/models/under_load.py [MODEL ...] [--duty 0.5] [--rounds 7]

An edge server runs other work beside the model. Each model of ``zoo.CORPUS`` named (default:
four CNNs and a transformer) is exported to ONNX, compiled for the whole CPU as the corpus
does, and timed with two threads beside ONNX Runtime (two intra-op threads) in interleaved
rounds, each round quiet and then loaded: a process of this script's pinned to the last core
spins for ``--duty`` of every 10 ms and sleeps the rest (the load is measured: its share of
that core while the runtimes ran). Ours runs twice in each, on the claiming pool (the
package's, :mod:`tvm_hetero.runtime.claiming_pool`) and on TVM's own pool
(``TVM_HETERO_POOL=tvm``). Each time is the median over the rounds of each round's median run.
One JSON line per model in ``benchmarks/results/under_load.jsonl``.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from stamp import stamp  # noqa: E402

MODELS = ("mobilenet_v2", "mnasnet1_0", "squeezenet1_1", "resnet50", "bert")
PERIOD_S = 0.01
"""The load's cycle: it spins for ``duty`` of it and sleeps the rest."""


def _spin(core: int, duty: float, stop, busy) -> None:
    """Spin ``duty`` of every :data:`PERIOD_S` on ``core`` until ``stop`` is set; add the CPU
    seconds spent to ``busy``."""
    os.sched_setaffinity(0, {core})
    start = time.process_time()
    while not stop.is_set():
        until = time.perf_counter() + duty * PERIOD_S
        while time.perf_counter() < until:
            pass
        time.sleep((1 - duty) * PERIOD_S)
    busy.value = time.process_time() - start


class Load:
    """A process spinning ``duty`` of every 10 ms on ``core`` while the ``with`` block runs;
    ``share`` is the CPU it got over the block's wall time."""

    def __init__(self, core: int, duty: float) -> None:
        self.core, self.duty, self.share = core, duty, 0.0

    def __enter__(self) -> Load:
        ctx = multiprocessing.get_context("fork")
        self._stop, self._busy = ctx.Event(), ctx.Value("d", 0.0)
        self._proc = ctx.Process(target=_spin, args=(self.core, self.duty, self._stop, self._busy))
        self._start = time.perf_counter()
        self._proc.start()
        time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._proc.join(timeout=5)
        self.share = self._busy.value / (time.perf_counter() - self._start)


def measure(name: str, rounds: int, duty: float, work: Path) -> dict:
    """One model's row: quiet and loaded times, ours and ONNX Runtime's, and the load's share."""
    import numpy as np
    from ort_timing import cpu_session
    from ort_timing import median_seconds as ort_median_seconds
    from zoo import exported_feeds, onnx_path

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.runtime import claiming_pool
    from tvm_hetero.runtime.measure import MeasureConfig

    path = onnx_path(work, name)
    given, feeds = exported_feeds(name, path)
    model = load_model(path, shapes=given)
    feeds = {s.name: feeds[s.name] for s in model.inputs}
    compiled = api.compile(model, [cpu_device(threads=2)])
    session = cpu_session(path, 2)
    got, expected = api.run(compiled, feeds), session.run(None, feeds)
    scale = max(float(np.abs(e).max()) for e in expected) or 1.0
    config = MeasureConfig(repeat=5, min_repeat_ms=100)
    times: dict[str, list[float]] = {
        f"{k}{loaded}": [] for k in ("tvm", "tvm_pool_tvm", "ort") for loaded in ("", "_loaded")
    }
    shares = []
    core = max(os.sched_getaffinity(0))

    def ours(pool: str) -> float:
        os.environ["TVM_HETERO_POOL"] = pool  # read as the executor's thread takes its pool
        return api.median_seconds(compiled, feeds, config) * 1e3

    for _ in range(rounds):
        for loaded in ("", "_loaded"):
            with Load(core, duty) if loaded else contextlib.nullcontext() as load:
                times[f"tvm{loaded}"].append(ours("claiming"))
                times[f"tvm_pool_tvm{loaded}"].append(ours("tvm"))
                times[f"ort{loaded}"].append(ort_median_seconds(session, feeds, config) * 1e3)
        shares.append(load.share)
    os.environ.pop("TVM_HETERO_POOL")
    row = {"model": name, "duty": duty, "rounds": rounds, "load_share": statistics.median(shares),
           "rel_err": api.max_abs_error(got, expected) / scale,
           "pool": claiming_pool.unavailable() or "claiming"}  # fmt: skip
    for key, values in times.items():
        row[f"{key}_ms"] = statistics.median(values)
        row[f"{key}_rounds_ms"] = values
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS), metavar="MODEL")
    parser.add_argument("--duty", type=float, default=0.5, help="the load's share of its core")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="under_load.jsonl")
    args = parser.parse_args()
    from zoo import CORPUS

    unknown = [m for m in args.models if m not in CORPUS]
    wrong = (
        f"model {unknown[0]!r}: not in zoo.CORPUS" if unknown
        else f"--duty {args.duty}: a share in (0, 1)" if not 0 < args.duty < 1
        else f"--rounds {args.rounds}: at least 1" if args.rounds < 1
        else None
    )  # fmt: skip
    if wrong is not None:
        print(f"under_load.py: {wrong}", file=sys.stderr)
        return 2
    sys.path.append(str(HERE.parent / "cpu_kernels"))
    from onnx_models import append_rows  # after the flags: it imports torch

    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            row = {**stamp(), **measure(name, args.rounds, args.duty, Path(tmp))}
            append_rows([row], args.out)
            quiet, loaded = (
                row["tvm_ms"] / row["ort_ms"],
                row["tvm_loaded_ms"] / row["ort_loaded_ms"],
            )
            print(f"{name:>16}: {quiet:.2f}x ORT quiet, {loaded:.2f}x loaded (ours "
                  f"x{row['tvm_loaded_ms'] / row['tvm_ms']:.2f}, on TVM's pool "
                  f"{row['tvm_pool_tvm_loaded_ms'] / row['ort_loaded_ms']:.2f}x ORT loaded, "
                  f"ORT x{row['ort_loaded_ms'] / row['ort_ms']:.2f})", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
