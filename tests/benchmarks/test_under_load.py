"""``benchmarks/models/under_load.py``: its load takes its share of one core, and bad flags
are refused before any model is built."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "models"))

import under_load  # noqa: E402


def test_the_load_spins_on_its_core_and_stops():
    """A load of duty 0.9 for half a second uses some of its core (far more than idle) and its
    process is gone after the block."""
    core = max(os.sched_getaffinity(0))
    with under_load.Load(core, 0.9) as load:
        time.sleep(0.5)
    assert 0.2 < load.share < 1.2
    assert not load._proc.is_alive()


@pytest.mark.parametrize(
    ("args", "said"),
    [(["nosuch"], "model 'nosuch': not in zoo.CORPUS"),
     (["bert", "--duty", "1.5"], "--duty 1.5: a share in (0, 1)"),
     (["bert", "--rounds", "0"], "--rounds 0: at least 1")],
)  # fmt: skip
def test_bad_flags_exit_2_with_one_line(args, said):
    done = subprocess.run([sys.executable, "benchmarks/models/under_load.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"under_load.py: {said}"]
