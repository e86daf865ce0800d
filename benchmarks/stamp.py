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
    """The CPU's model name and how many cores this process may use."""
    import os

    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {len(os.sched_getaffinity(0))} cores"


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
