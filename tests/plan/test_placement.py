import json

import pytest

from tvm_hetero.plan import Placement, PlanError, normalize_op_type, place_by_op_type, summarize

OPS = [("a", "relax.matmul"), ("b", "relax.add"), ("c", "relax.matmul"), ("d", "relax.nn.relu")]


def test_place_by_op_type():
    plan = place_by_op_type(OPS, {"matmul": 1}, ["cpu", "cuda:0"])
    assert dict(plan.assignment) == {"a": 1, "c": 1}
    assert [plan.device_of(n) for n, _ in OPS] == [1, 0, 1, 0]
    with pytest.raises(PlanError, match=r"op type\(s\) relax.nn.conv2d do not occur in the model"):
        place_by_op_type(OPS, {"nn.conv2d": 1}, ["cpu", "cuda:0"])


def test_placement_validation_and_json():
    with pytest.raises(
        PlanError, match=r"operator 'a' is assigned device index 2; valid indices are 0..1"
    ):
        Placement(("cpu", "cpu:1"), {"a": 2})
    with pytest.raises(PlanError, match="at least one device"):
        Placement(())
    plan = Placement(("cpu", "cpu:1"), {"a": 1}, "manual")
    assert Placement.from_dict(json.loads(plan.to_json())) == plan
    with pytest.raises(PlanError, match="not a placement plan"):
        Placement.from_dict({"kind": "stages"})


def test_normalize_op_type():
    assert normalize_op_type("nn.conv2d") == "relax.nn.conv2d"
    assert normalize_op_type("relax.matmul") == "relax.matmul"


def test_summarize_counts_cross_device_bytes():
    plan = Placement(("cpu", "gpu"), {"b": 1, "c": 1})
    ops = [("a", 10), ("b", 20), ("c", 30), ("d", 40)]
    edges = [("a", "b", 100), ("b", "c", 50), ("c", "d", 7), ("a", "d", 3)]
    rows = summarize(ops, edges, plan)
    assert rows[0] == {
        "device": "cpu",
        "ops": 2,
        "flops": 50,
        "copies_in": 1,
        "bytes_in": 7,
        "flops_share": 0.5,
    }
    assert rows[1]["copies_in"] == 1 and rows[1]["bytes_in"] == 100 and rows[1]["flops"] == 50


def test_placement_of_a_full_assignment_lists_only_moved_operators():
    from tvm_hetero.plan.placement import Placement

    p = Placement.of(["cpu", "cpu:1"], {"a": 0, "b": 1, "c": 0}, "als", 2.0)
    assert p == Placement(("cpu", "cpu:1"), {"b": 1}, "als", 2.0)
    assert [p.device_of(o) for o in "abc"] == [0, 1, 0]
