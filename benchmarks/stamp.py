"""Where a benchmark's figures come from: the fields every results file should carry.

``stamp()`` gives the command line, the commit, the host's CPU and the date, for a results
file's top level (or each JSON line); ``benchmarks/report/`` prints them beside every table.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def host() -> str:
    """The CPU's model name with its family and model (a cloud host says ``AMD EPYC`` for Zen 3
    and Zen 4 alike), how many cores this process may use, and its widest vectors."""
    import os

    from tvm_hetero.records import cpu_model

    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    flags = next((line for line in lines if line.startswith("flags")), "")
    isa = next((name for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"))
                if f" {flag}" in flags), "")  # fmt: skip
    cores = f"{len(os.sched_getaffinity(0))} cores"
    return ", ".join(part for part in (cpu_model(), cores, isa) if part)


def stamp() -> dict[str, str]:
    """``command``, ``commit`` (with ``+dirty`` for uncommitted changes), ``host`` and ``date``."""
    git = ["git", "-C", str(ROOT)]
    try:
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    argv = [str(Path(sys.argv[0]).resolve().relative_to(ROOT)), *sys.argv[1:]]
    return {
        "command": " ".join(argv),
        "commit": commit,
        "host": host(),
        "date": datetime.date.today().isoformat(),
    }
