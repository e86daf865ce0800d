"""``benchmarks/models/paired_replay.py``'s turns and ratios, and its refusals."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "models"))

import paired_replay  # noqa: E402


def test_each_turn_runs_both_replays_and_ort_in_a_rotating_order(monkeypatch):
    """Every turn runs the two builds' calls and ONNX Runtime once each, the first of the three
    changing from turn to turn; the warm turns are not kept; ``--only``'s calls are summed
    apart."""
    order: list[str] = []
    before = [("conv_a", lambda: order.append("before"), []), ("add", lambda: None, [])]
    now = [("conv_a", lambda: order.append("now"), []), ("add", lambda: None, [])]
    monkeypatch.setattr(paired_replay, "WARM_TURNS", 2)
    samples = paired_replay.paired_turns(
        before, now, lambda: order.append("ort") or 5.0, 4, re.compile("conv")
    )
    assert [len(v) for v in samples.values()] == [4, 4, 4]
    firsts = [order[3 * turn] for turn in range(6)]
    assert firsts == ["before", "now", "ort", "before", "now", "ort"]
    assert all(total >= picked > 0 for total, picked in samples["before"] + samples["now"])
    assert samples["ort"] == [(5.0, 0.0)] * 4


def test_the_summary_takes_the_median_of_the_per_turn_ratios():
    """The ratio is the median of each turn's now / before, not the ratio of the medians: a
    slow spell that falls on one turn's pair moves neither."""
    samples = {
        "before": [(100.0, 10.0), (200.0, 20.0), (100.0, 10.0), (100.0, 10.0)],
        "now": [(90.0, 5.0), (180.0, 10.0), (95.0, 5.0), (300.0, 30.0)],
        "ort": [(50.0, 0.0)] * 4,
    }
    row = paired_replay.summary(samples)
    assert row["now_over_before"] == pytest.approx(0.925)  # of 0.9, 0.9, 0.95, 3.0
    assert row["only_now_over_before"] == pytest.approx(0.5)
    assert row["now_over_ort"] == pytest.approx(row["now_us"] / 50.0)
    no_only = {k: [(t, 0.0) for t, _ in v] for k, v in samples.items()}
    assert "only_now_over_before" not in paired_replay.summary(no_only)


@pytest.mark.parametrize(
    ("args", "said"),
    [(["resnet18", "--off", "tvm_hetero.schedules.cpu.matmul:NOPE=1"], "has no 'NOPE'"),
     (["resnet18", "--off", "x"], "is not MODULE:NAME=EXPR"),
     (["no_such_model", "--off", "tvm_hetero.schedules.cpu.matmul:MAX_IMBALANCE=1.1"],
      "is not in the corpus"),
     (["resnet18", "--off", "tvm_hetero.schedules.cpu.matmul:MAX_IMBALANCE=1.1", "--runs", "2"],
      "--runs: 2 is too few"),
     (["resnet18", "--off", "tvm_hetero.schedules.cpu.matmul:MAX_IMBALANCE=1.1", "--only", "("],
      "missing )")],
)  # fmt: skip
def test_bad_arguments_exit_2_with_one_line_before_any_export(args, said):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "models" / "paired_replay.py"), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert said in last and "Traceback" not in done.stderr, done.stderr
