"""Seconds from launching ``tvm-hetero worker`` (the TVM runtime alone) to its "listening on".

Run as ``python benchmarks/runtime/worker_start.py [--starts N]``; prints each start and the
median. No peer: ONNX Runtime has no worker to start.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time


def start_seconds() -> float:
    """One worker's start on a free loopback port, then killed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    argv = [sys.executable, "-m", "tvm_hetero.cli.main", "worker", "--port", str(port),
            "--port-end", str(port + 1)]  # fmt: skip
    begin = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    try:
        for line in proc.stdout:
            if "listening on" in line:
                return time.perf_counter() - begin
        raise RuntimeError("the worker ended before it listened")
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=4)
    starts = [start_seconds() for _ in range(parser.parse_args().starts)]
    print("starts s:", " ".join(f"{s:.2f}" for s in starts))
    print(f"median {statistics.median(starts):.2f} s")


if __name__ == "__main__":
    main()
