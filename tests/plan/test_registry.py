"""Plans by kind: every kind reads back from its JSON form and names the pipeline that realises it."""

import json

import pytest

from tvm_hetero.pipelines import PIPELINES
from tvm_hetero.plan.eop import OpSplit, SplitPlan
from tvm_hetero.plan.pipeline_plan import PipelinePlan
from tvm_hetero.plan.placement import Placement, PlanError
from tvm_hetero.plan.registry import PLAN_KINDS, load_plan, plan_from_dict, save_plan
from tvm_hetero.plan.spatial_plan import SpatialPlan
from tvm_hetero.plan.subgraph_plan import SubgraphPlan

PLANS = {
    "placement": Placement(("cpu@0", "cpu@1"), {"matmul": 1}, "als", 1e-3),
    "split": SplitPlan(
        "eop", ("cpu@0", "cpu@1"),
        (OpSplit("matmul", "relax.matmul", "N", 8, (5, 3), (1e-4, 1e-4), 1e-5, 2e-4),),
        1e-3,
    ),
    "subgraphs": SubgraphPlan(
        ("cpu@0", "cpu@1"), (("a", "b"), ("c",), ("d",)), (0, 1, 0), (0, 0, 1), "duet", 1e-3, 2e-3
    ),
    "pipeline": PipelinePlan(
        ("edge-a", "edge-b"), (("a", "b"), ("c", "d")), ((0, 1), (2, 3)), "edgepipe", 2e-3,
        (2e-3, 1e-3), (5e-4, 0.0), (4096, 2048),
    ),
    "spatial": SpatialPlan(
        ("edge-a", "edge-b", "edge-c"), (("a", "b"), ("c",), ("d",)), ("Grid", "OutC", "Home"),
        ((0, 1), (2, 2), (3, 3)), "flexpie", 4e-3,
    ),
}  # fmt: skip


def test_every_kind_has_an_example_here():
    assert set(PLANS) == set(PLAN_KINDS)


@pytest.mark.parametrize("kind", sorted(PLANS))
def test_round_trip_and_realisation(kind, tmp_path):
    plan = PLANS[kind]
    again = plan_from_dict(plan.to_dict())
    assert again.to_dict() == plan.to_dict()
    name, arguments = again.realisation()
    assert name in PIPELINES and set(arguments) | {"vdevices"} == set(PIPELINES[name].params)
    name, arguments = again.units()
    assert name in PIPELINES and set(arguments) == set(PIPELINES[name].params)
    path = save_plan(plan, "model-a", tmp_path / "plan.json")
    assert load_plan(path, "model-a").to_dict() == plan.to_dict()
    with pytest.raises(PlanError, match="model-a"):
        load_plan(path, "model-b")
    anonymous = tmp_path / "anonymous.json"
    anonymous.write_text(json.dumps(plan.to_dict()))
    with pytest.raises(PlanError, match=r'does not say which model.*add "model": "model-b"'):
        load_plan(anonymous, "model-b")
    assert load_plan(anonymous).to_dict() == plan.to_dict()  # no model to check against


def test_a_spatial_plan_refuses_unknown_schemes_and_shared_operators():
    with pytest.raises(PlanError, match=r"unknown schemes \['Rows'\]"):
        SpatialPlan(("a", "b"), (("x",),), ("Rows",))
    with pytest.raises(PlanError, match="operator 'x' is in segments 0 and 1"):
        SpatialPlan(("a", "b"), (("x",), ("x",)), ("InH", "InW"))
    with pytest.raises(PlanError, match="2 segments need as many schemes, got 1"):
        SpatialPlan(("a", "b"), (("x",), ("y",)), ("InH",))
