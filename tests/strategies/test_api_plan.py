"""``api.plan`` and ``api.profile``: the Python interface the notebooks call, by strategy name."""

import numpy as np
import pytest

from tvm_hetero import api
from tvm_hetero.devices import DeviceKind, DeviceSpec, resolve_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.eop import SplitPlan
from tvm_hetero.plan.pipeline_plan import PipelinePlan
from tvm_hetero.plan.placement import Placement
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.zoo import load_zoo_model


@pytest.fixture(scope="module")
def cores():
    return [resolve_device("cpu@0"), resolve_device("cpu@1")]


@pytest.fixture(scope="module")
def mlp():
    return load_zoo_model("mlp:tiny", batch=16, sizes=[32, 64, 8])


def _runs_like_the_reference(model, devices, plan) -> None:
    x = model.random_inputs()
    compiled = api.compile(model, api.in_plan_order(devices, plan), plan)
    got = api.run(compiled, x)
    np.testing.assert_allclose(got[0], api.reference_outputs(model, x, devices[0])[0], rtol=1e-5)


def test_plan_by_strategy_name_compiles_and_runs(tmp_path, cores, mlp):
    als = api.plan(mlp, cores, "als", min_gain=0.05)
    # two alike cores, priced as one: Lee et al.'s one-at-a-time plan keeps one of them
    assert isinstance(als, Placement) and len(als.devices) == 1 and not als.assignment
    assert als.devices[0] in {"cpu@0", "cpu@1"}
    _runs_like_the_reference(mlp, cores, als)
    eop = api.plan(mlp, cores, "eop", db=tmp_path / "p.jsonl", samples=3)
    assert isinstance(eop, SplitPlan) and set(eop.devices) == {"cpu@0", "cpu@1"}
    assert (tmp_path / "p.jsonl").exists() and (tmp_path / "patterns.json").exists()
    _runs_like_the_reference(mlp, cores, eop)
    pipe = api.plan(mlp, cores, "edgepipe", db=tmp_path / "p.jsonl")
    assert isinstance(pipe, PipelinePlan) and pipe.period_s is not None
    _runs_like_the_reference(mlp, cores, pipe)


def test_plan_refuses_an_unknown_strategy_and_no_devices(cores, mlp):
    choices = "als, duet, edgepipe, eop, flexpie"
    with pytest.raises(ValueError, match=f"--strategy 'best': choose from {choices}"):
        api.plan(mlp, cores, "best")
    with pytest.raises(ValueError, match="give at least one device"):
        api.plan(mlp, [], "als")


def test_profile_times_every_operator_once_per_device(tmp_path, cores, mlp):
    db = tmp_path / "p.jsonl"
    seen = []
    times = api.profile(mlp, cores, db, progress=lambda *a: seen.append(a))
    ops = {n.node_id for n in OpGraph.from_module(mlp.mod).nodes}
    assert set(times) == {"cpu@0", "cpu@1"}
    assert all(set(t) == ops and min(r.median_s for r in t.values()) > 0 for t in times.values())
    assert {s[0] for s in seen} == {"cpu@0", "cpu@1"} and seen[-1][2:] == (len(ops), len(ops))
    lines = db.read_text().count("\n")
    again = api.profile(mlp, cores, db)  # served from the database: nothing measured again
    assert db.read_text().count("\n") == lines
    assert again["cpu@0"].keys() == times["cpu@0"].keys()


# two pinned workers, a core each, timed a microsecond or two a hop: beside another test worker
# every sample of the 8-hop chain fell below the one-unit chain's median once in a fresh-clone CI
@pytest.mark.whole_machine
def test_handoff_between_two_workers_is_measured_once_and_positive(tmp_path, cores):
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"))
    first = profiler.profile_handoff(*cores, hops=8, repeat=10)
    assert 0 < first.median_s < 1e-2 and profiler.misses == 1
    again = profiler.profile_handoff(*cores, hops=8, repeat=10)
    assert again.median_s == first.median_s and profiler.hits == 1
    profiler.profile_handoff(*cores, hops=8, repeat=10, setting="a ring at 50 Mbit/s")
    assert profiler.misses == 2  # another cluster's handoff is measured, not served
    pim = DeviceSpec("pim", DeviceKind.SIMULATED, profile="lee2023:pim")
    with pytest.raises(ValueError, match="simulated"):
        profiler.profile_handoff(cores[0], pim)
