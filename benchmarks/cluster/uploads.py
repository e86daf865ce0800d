"""A library's upload to a remote worker: ours over the data port against TVM RPC's own.

    .venv/bin/python benchmarks/cluster/uploads.py [--mib 256] [--rounds 5] \
        [--out benchmarks/results/uploads.json]

One ``tvm-hetero worker`` on loopback (TVM runtime library only, no CPU quota). Each round, in
turn, on a session of its own: TVM RPC's ``upload`` (``RPCSession.upload``: the whole file in
one call), ours with bytes the worker has not seen (one byte of the file changed each round:
sent, received, hashed and written), and ours with the same bytes again (kept by the worker
from the round before: nothing sent). The sessions are opened before the clock starts; the
times are medians over the rounds, with the rate of the bytes moved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stamp import ROOT, stamp


def _start_worker(port: int, cache: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tvm_hetero.runtime.rpc_worker", "--port", str(port),
            "--port-end", str(port + 50), "--cache", str(cache)]  # fmt: skip
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env, cwd=ROOT)  # fmt: skip
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"the worker did not start: {line!r}")
    proc.port = int(line.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    return proc


def _session(port: int):
    import tvm.rpc

    return tvm.rpc.connect("127.0.0.1", port, session_timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="the library's size (MiB)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="results file (JSON)")
    args = parser.parse_args()

    from tvm_hetero.runtime.rpc_worker import PREFIX
    from tvm_hetero.runtime.uploads import file_digest, upload

    times: dict[str, list[float]] = {"tvm_rpc_upload": [], "ours_sent": [], "ours_kept": []}
    with tempfile.TemporaryDirectory() as folder:
        lib = Path(folder) / "lib.so"
        lib.write_bytes(os.urandom(args.mib << 20))
        worker = _start_worker(9500, Path(folder) / "cache")
        try:
            for r in range(args.rounds):
                with open(lib, "r+b") as f:  # bytes the worker has not seen
                    f.write(r.to_bytes(8, "little"))
                file_digest(lib)  # the client's hash, once per file version: not timed
                session = _session(worker.port)
                start = time.perf_counter()
                session.upload(str(lib), "rpc.so")
                times["tvm_rpc_upload"].append(time.perf_counter() - start)
                del session
                for kind, sent in (("ours_sent", True), ("ours_kept", False)):
                    session = _session(worker.port)
                    port = int(session.get_function(PREFIX + "data_port")())
                    start = time.perf_counter()
                    assert upload("127.0.0.1", port, lib, "lib.so", 60.0) is sent, kind
                    times[kind].append(time.perf_counter() - start)
                    del session
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in
                                                     times.items()), flush=True)  # fmt: skip
        finally:
            worker.kill()
            worker.wait()
    nbytes = args.mib << 20
    rows = [
        {"method": k, "median_s": statistics.median(v), "samples_s": v,
         "mib_per_s": nbytes / 2**20 / statistics.median(v)}
        for k, v in times.items()
    ]  # fmt: skip
    for row in rows:
        print(f"{row['method']:>15}: {row['median_s']:.3f} s, {row['mib_per_s']:.0f} MiB/s")
    if args.out:
        result = {**stamp(), "bytes": nbytes, "rounds": args.rounds, "rows": rows}
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
