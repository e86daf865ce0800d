"""FlexPie's traces say which CPU rules built the kernels they timed; the estimators are fitted
on the newest traced for each vector width, and a plan says when they priced older kernels."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import conv_trace_row

from tvm_hetero.costmodel.estimators import Estimator, train
from tvm_hetero.devices import resolve_device
from tvm_hetero.schedules.cpu import RULES_VERSION
from tvm_hetero.strategies.flexpie.planner import device_features, stale_kernels
from tvm_hetero.strategies.flexpie.traces import read_traces


def _line(width: int, lanes: int, seconds: float, rules: int | None) -> str:
    features = conv_trace_row(64, width, lanes=lanes)
    trace = {"estimator": "compute", "features": features, "seconds": seconds, "device": "cpu",
             "source": "tile"}  # fmt: skip
    if rules is not None:
        trace["rules"] = rules
    return json.dumps(trace)


@pytest.fixture
def traces(tmp_path):
    """16-lane tiles timed under rules v12 and again under v30 (twice as fast), 4-lane tiles
    traced before rules were recorded, in two files."""
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text("\n".join(
        [_line(w, 16, 2e-4 * w, 12) for w in range(1, 9)]
        + [_line(w, 4, 5e-4 * w, None) for w in range(1, 9)]
    ) + "\n")  # fmt: skip
    new.write_text("\n".join(_line(w, 16, 1e-4 * w, 30) for w in range(1, 9)) + "\n")
    return old, new


def test_only_the_newest_rules_traced_for_a_width_are_kept(traces):
    old, new = traces
    rows, seconds = read_traces(old, new)["compute"]
    assert sorted({(r["lanes"], r["rules"]) for r in rows}) == [(4, 0), (16, 30)]
    sixteen = [s for r, s in zip(rows, seconds, strict=True) if r["lanes"] == 16]
    assert sixteen == pytest.approx([1e-4 * w for w in range(1, 9)])
    assert len(rows) == 16
    # one file alone: its own newest; without the filter, every row
    assert {r["rules"] for r in read_traces(old)["compute"][0] if r["lanes"] == 16} == {12}
    assert len(read_traces(old, new, newest_only=False)["compute"][0]) == 24


def test_an_estimator_notes_the_rules_it_was_fitted_on(traces):
    rows, seconds = read_traces(*traces)["compute"]
    est = train("compute", rows, seconds, rounds=5)
    assert est.notes["rules"] == {"4": 0, "16": 30}
    # a rule's version is no feature: the rows predict alike without it
    bare = [{k: v for k, v in r.items() if k != "rules"} for r in rows]
    np.testing.assert_allclose(est.predict(bare), est.predict(rows))


def test_a_plan_says_when_its_estimator_priced_older_kernels():
    device = resolve_device("cpu")
    lanes = str(int(device_features(device)["lanes"]))

    def noted(rules: dict) -> Estimator:
        return Estimator("compute", None, 0.1, 10, {"rules": rules} if rules else {})

    assert stale_kernels(noted({lanes: RULES_VERSION}), [device]) is None
    said = stale_kernels(noted({lanes: RULES_VERSION - 1}), [device])
    assert f"{lanes} lanes: v{RULES_VERSION - 1}" in said and f"v{RULES_VERSION}" in said
    for rules in ({}, {lanes: 0}, {"3": RULES_VERSION}):
        assert "not traced with versioned rules" in stale_kernels(noted(rules), [device])


@pytest.mark.parametrize(("stride", "computed"), [(2, 32), (5, 28)])
def test_the_compute_estimator_prices_strided_depthwise_rows_as_the_build_widens_them(
    stride, computed
):
    """A depthwise row of 28 columns on 8 lanes: with a column stride of 2 (read as whole
    vectors and a permute) computed 32 wide, as ``PadConvolutionOutputs`` widens it; with a
    stride of 5 (read lane by lane) it keeps its 28 columns (four vectors of 7)."""
    from tvm_hetero.costmodel.estimators import FEATURES, OP_KINDS, _widened

    row = {**conv_trace_row(64, 28), "kind": OP_KINDS["depthwise"], "groups": 64}
    row["stride"] = stride
    matrix = np.array([[float(row[f]) for f in FEATURES["compute"]]])
    assert _widened(matrix)[0] == pytest.approx(computed / 28)
