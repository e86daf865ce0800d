"""What one CPU <-> GPU crossing is made of, timed part by part on the GPU box (runtime only).

For each size: a copy host -> GPU into a new tensor (what ``Tensor.copyto(device)`` does:
``cudaMalloc``, the copy, and ``cudaFree`` when the last run's tensor goes) and into a tensor
kept from before; the same back; ``device.sync()`` with nothing running; and the hand-over of
a job to another thread (a ``queue`` put and the other thread's wake-up, there and back: what
the executor paid per crossing before it ran a GPU unit on the thread that made it ready).
Medians of ``--repeat`` samples, microseconds, one JSON line::

    PYTHONPATH=box/site TVM_USE_RUNTIME_LIB=1 python3 benchmarks/gpu/crossing_parts.py \\
        --out $OUT/crossing_parts.json
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
from collections.abc import Callable

import numpy as np


def median_us(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn`` in microseconds, after 20 warm-up calls."""
    for _ in range(20):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)) * 1e6


def hand_over_us(repeat: int) -> float:
    """A job handed to another thread and its answer handed back (two wake-ups)."""
    jobs: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def loop() -> None:
        while (job := jobs.get()) is not None:
            done.put(job)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        return median_us(lambda: (jobs.put(1), done.get()), repeat)
    finally:
        jobs.put(None)
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--kib", type=int, nargs="+", default=[4, 64, 1024])
    args = parser.parse_args()
    import tvm

    from tvm_hetero.runtime.cuda import cuda_device

    gpu, cpu = cuda_device(0), tvm.cpu(0)
    result: dict = {"tvm": tvm.__version__, "gpu": str(gpu), "repeat": args.repeat}
    result["sync_idle_us"] = median_us(gpu.sync, args.repeat)
    result["hand_over_there_and_back_us"] = hand_over_us(args.repeat)
    for kib in args.kib:
        host = tvm.runtime.tensor(np.ones(kib * 256, "float32"), cpu)
        on_gpu = host.copyto(gpu)
        kept_gpu, kept_host = tvm.runtime.empty(host.shape, "float32", gpu), host.copyto(cpu)
        result[f"{kib}KiB"] = {
            "to_gpu_new_us": median_us(lambda h=host: h.copyto(gpu), args.repeat),
            "to_gpu_kept_us": median_us(lambda h=host, k=kept_gpu: h.copyto(k), args.repeat),
            "to_host_new_us": median_us(lambda g=on_gpu: g.copyto(cpu), args.repeat),
            "to_host_kept_us": median_us(lambda g=on_gpu, k=kept_host: g.copyto(k), args.repeat),
        }  # fmt: skip
    line = json.dumps(result)
    print(line)
    with open(args.out, "w") as out:
        out.write(line + "\n")


if __name__ == "__main__":
    main()
