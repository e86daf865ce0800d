"""Can the pinned wheel's Disco run per-worker programs on CPU workers (issue 60)? What a call
and a point-to-point move cost.

    cd benchmarks/runtime/disco && PYTHONPATH=. ../../../.venv/bin/python probe.py [--calls 500]

Two ``ProcessSession`` workers on this machine's CPU (entry point ``worker.py``). Prints, and
appends to ``benchmarks/results/disco_probe.jsonl``: a call run on both workers and waited for
(what one message a run would cost the client), and a 4 KiB and a 1 MiB tensor moved from
worker 0 to worker 1 by ``p2p.py`` (one call, waited for). Without ``p2p.py`` a send aborts the
worker process (``Cannot find the send_to_worker function for ``: no CCL).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import worker  # noqa: F401  (the extra library loaded before tvm, as in the workers)

ROOT = Path(__file__).resolve().parents[3]


def per_call_us(step, calls: int) -> float:
    """Median over 5 blocks of the mean time of ``step`` in microseconds."""
    for _ in range(20):
        step()
    blocks = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            step()
        blocks.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return float(np.median(blocks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import tvm  # after ``worker``: with Disco's library already loaded
    from tvm.runtime import disco

    from tvm_hetero.records import cpu_model

    session = disco.ProcessSession(num_workers=2, entrypoint="worker")
    rank = session.get_global_func("runtime.disco.worker_rank")

    def call_both() -> None:
        rank()
        session._sync_worker(0)
        session._sync_worker(1)

    row = {"host": cpu_model(), "call_on_both_us": per_call_us(call_both, args.calls)}
    move = session.get_global_func("p2p.zero_to_one")
    for label, count in (("4KiB", 1024), ("1MiB", 262144)):
        buffer = session.empty((count,), "float32", device=tvm.cpu(0))
        values = np.arange(count, dtype="float32")
        session.copy_to_worker_0(tvm.runtime.tensor(values), buffer)
        move(buffer)
        session._sync_worker(1)
        assert (buffer.debug_get_from_remote(1).numpy() == values).all(), "moved wrong"

        def moved(buffer=buffer) -> None:
            move(buffer)
            session._sync_worker(1)

        row[f"move_{label}_us"] = per_call_us(moved, args.calls)
    session.shutdown()
    print(json.dumps(row))
    with open(ROOT / "benchmarks/results/disco_probe.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
