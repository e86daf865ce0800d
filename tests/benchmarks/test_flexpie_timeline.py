"""``benchmarks/flexpie/timeline.py``'s time between a device's steps."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "flexpie"))

import timeline


def _event(worker: str, start_s: float, end_s: float) -> SimpleNamespace:
    return SimpleNamespace(worker=worker, start_s=start_s, end_s=end_s)


def test_between_steps_is_each_devices_mean_gap_in_start_order():
    events = [_event("e1", 0.0, 5.0), _event("e0", 4.0, 6.0), _event("e0", 0.0, 1.0),
              _event("e0", 1.5, 3.0), _event("e1", 4.0, 7.0)]  # fmt: skip
    gaps = timeline.between_steps(events)
    # e0: 1.0 -> 1.5 and 3.0 -> 4.0; e1's second step overlaps its first (no gap, not -1)
    assert gaps == pytest.approx({"e0": 0.75, "e1": 0.0})
    assert timeline.between_steps([_event("e2", 0.0, 1.0)]) == {"e2": 0.0}
