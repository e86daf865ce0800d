"""How finely a CPU quota holds an emulated device: bursts, pauses and the speed it keeps.

    sudo .venv/bin/python benchmarks/cluster/quota_bursts.py [--quota 0.45] [--rounds 3]
        [--out benchmarks/results/quota_bursts.json]

An emulated device (``tvm_hetero/emulation/control.py``) is a cgroup v1 ``cpu`` group held to
``--quota`` cores in ``control.cfs_period_us`` periods. Each setting below holds a group so (a
period, and whether a process of the group wakes every ``tick`` seconds on the same core beside
the held one: the kernel charges a running task's time to its group's quota at its scheduler
tick or when a task of its group wakes there) and runs two things in it on core 1: a loop of
timestamps for a second (a pause: two timestamps more than 50 us apart), its bursts and pauses;
and a loop of 256 x 256 float32 matmuls (numpy, one thread), whose time unheld over its time
held is the share of a core the device keeps (``effective``). Settings interleave in
``--rounds`` rounds; medians over them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from stamp import stamp

from tvm_hetero.emulation import control

GROUP = control.CGROUP_ROOT / "cpu" / "tvm-hetero-quota-bursts"
CORE = "1"
BURSTS = """
import json, time
end = time.perf_counter() + 1.0
last = start = time.perf_counter()
runs, pauses = [], []
while last < end:
    now = time.perf_counter()
    if now - last > 5e-5:
        runs.append(last - start)
        pauses.append(now - last)
        start = now
    last = now
print(json.dumps([runs[1:], pauses[1:]]))
"""
MATMULS = """
import sys, time
import numpy as np
a, b = np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)
start = time.perf_counter()
for _ in range(int(sys.argv[1])):
    a @ b
print(time.perf_counter() - start)
"""
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def settings(quota: float) -> dict[str, tuple[int, float] | None]:
    """Name: (period us, tick s or 0), or None for a core unheld."""
    default = control.cfs_period_us(quota)  # what an emulated device is held in
    finest = max(1000, math.ceil(control.MIN_QUOTA_US / quota))  # the kernel's least quota
    return {
        "unheld": None,
        f"{default / 1e3:g} ms": (default, 0.0),
        f"{default / 1e3:g} ms, tick 0.2 ms": (default, 2e-4),
        f"{finest / 1e3:g} ms": (finest, 0.0),
        f"{finest / 1e3:g} ms, tick 0.2 ms": (finest, 2e-4),
        f"{finest / 1e3:g} ms, tick 0.5 ms": (finest, 5e-4),
    }


def held(code: str, quota: float, setting: tuple[int, float] | None, *args: str) -> str:
    """``code``'s output, run on :data:`CORE` in :data:`GROUP` held as ``setting`` says."""
    GROUP.mkdir(exist_ok=True)
    (GROUP / "cpu.cfs_quota_us").write_text("-1")
    ticks = []
    if setting is not None:
        period, tick = setting
        (GROUP / "cpu.cfs_period_us").write_text(str(period))
        (GROUP / "cpu.cfs_quota_us").write_text(str(round(quota * period)))
        if tick:
            argv = ["taskset", "-c", CORE, sys.executable, "-c",
                    f"import time\nwhile True:\n    time.sleep({tick})"]  # fmt: skip
            ticks.append(subprocess.Popen(argv, preexec_fn=_join))
            time.sleep(0.2)
    try:
        done = subprocess.run(
            ["taskset", "-c", CORE, sys.executable, "-c", code, *args], preexec_fn=_join,
            capture_output=True, text=True, check=True, env=dict(os.environ, **ONE_THREAD),
        )  # fmt: skip
    finally:
        for tick in ticks:
            tick.kill()
            tick.wait()
    return done.stdout


def _join() -> None:
    (GROUP / "cgroup.procs").write_text(str(os.getpid()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quota", type=float, default=0.45)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--matmuls", type=int, default=3000)
    parser.add_argument("--out", default="benchmarks/results/quota_bursts.json")
    args = parser.parse_args()
    if (why := control.missing_privilege()) is not None:
        parser.error(why)
    said = stamp()
    found: dict[str, dict[str, list[float]]] = {}
    try:
        for _ in range(args.rounds):
            for name, setting in settings(args.quota).items():
                row = found.setdefault(name, {"runs_ms": [], "pauses_ms": [], "matmuls_s": []})
                runs, pauses = json.loads(held(BURSTS, args.quota, setting))
                row["runs_ms"] += [r * 1e3 for r in runs]
                row["pauses_ms"] += [p * 1e3 for p in pauses]
                seconds = held(MATMULS, args.quota, setting, str(args.matmuls))
                row["matmuls_s"].append(float(seconds))
    finally:
        if GROUP.is_dir():
            GROUP.rmdir()
    unheld = statistics.median(found["unheld"]["matmuls_s"])
    rows = []
    print(f"{'setting':>22} {'burst ms':>8} {'longest':>7} {'pause ms':>8} {'longest':>7} "
          f"{'effective':>9}")  # fmt: skip
    for name, row in found.items():
        runs, pauses = row["runs_ms"] or [0.0], row["pauses_ms"] or [0.0]
        summary = {
            "setting": name, "burst_ms": statistics.median(runs), "longest_burst_ms": max(runs),
            "pause_ms": statistics.median(pauses), "longest_pause_ms": max(pauses),
            "effective_cores": unheld / statistics.median(row["matmuls_s"]),
        }  # fmt: skip
        rows.append(summary)
        print(f"{name:>22} {summary['burst_ms']:8.2f} {summary['longest_burst_ms']:7.2f} "
              f"{summary['pause_ms']:8.2f} {summary['longest_pause_ms']:7.2f} "
              f"{summary['effective_cores']:9.3f}")  # fmt: skip
    Path(args.out).write_text(json.dumps({**said, "quota": args.quota, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
