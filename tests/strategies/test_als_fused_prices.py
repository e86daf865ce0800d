"""Lee et al.'s operator prices scaled to each device's fused run of the model."""

from types import SimpleNamespace

import pytest

from tvm_hetero.devices import resolve_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.als import Costs
from tvm_hetero.plan.dcg import DAKey
from tvm_hetero.profiling.offline import OfflineRunner
from tvm_hetero.profiling.profiler import profiler_for
from tvm_hetero.runtime.timer import LocalRunner
from tvm_hetero.strategies.als import planner
from tvm_hetero.strategies.base import alone_seconds
from tvm_hetero.zoo import load_zoo_model


@pytest.fixture(scope="module")
def mlp():
    return load_zoo_model("mlp:tiny", batch=16, sizes=[32, 64, 8])


@pytest.fixture(scope="module")
def cores():
    return [resolve_device("cpu@0"), resolve_device("cpu@1")]


class FakeProfiler:
    """Answers ``profile_run`` with the next of ``runs_s`` (one per device, in order) and keeps
    the devices each was asked of."""

    def __init__(self, runner, runs_s):
        self.runner, self.runs_s, self.placed = runner, list(runs_s), []

    def profile_run(self, model, devices, plan, repeat):
        self.placed.append([d.name for d in devices])
        return SimpleNamespace(median_s=self.runs_s.pop(0))


def _costs(dcg, per_device_s):
    """Every operator at ``per_device_s[d]`` on device d (where capable)."""
    return Costs(
        {o: {d: per_device_s[d] for d in dcg.capable[o]} for o in dcg.ops},
        {DAKey(0, 1, "float32", 8): 1e-5},
    )


def test_each_devices_prices_scale_to_its_fused_run_within_limits(mlp):
    unlike = [resolve_device("cpu@0"), resolve_device("cpu")]  # one thread, and two
    assert unlike[0].compute_class != unlike[1].compute_class
    dcg = planner.dcg_of(OpGraph.from_module(mlp.mod), [d.name for d in unlike])
    n = len(dcg.ops)
    costs = _costs(dcg, [1e-3, 1e-3])
    # device 0's fused run is half its operators' sum; device 1's is ten times (clamped)
    fake = FakeProfiler(LocalRunner(), [0.5 * n * 1e-3, 10 * n * 1e-3])
    scales = planner.fused_scales(mlp, unlike, dcg, costs, fake)
    assert scales == pytest.approx({0: 0.5, 1: planner.FUSED_SCALE_LIMITS[1]})
    assert fake.placed == [["cpu@0"], ["cpu"]]  # each device alone
    scaled = planner.scaled_costs(costs, scales)
    assert all(scaled.node[o] == pytest.approx({0: 0.5e-3, 1: 4e-3}) for o in dcg.ops)
    assert scaled.edge == costs.edge  # copies are not scaled


def test_devices_of_one_compute_class_are_run_once_and_scaled_alike(mlp, cores):
    assert cores[0].compute_class == cores[1].compute_class  # two cores of this CPU
    dcg = planner.dcg_of(OpGraph.from_module(mlp.mod), [d.name for d in cores])
    fake = FakeProfiler(LocalRunner(), [0.5 * len(dcg.ops) * 1e-3])
    scales = planner.fused_scales(mlp, cores, dcg, _costs(dcg, [1e-3, 1e-3]), fake)
    assert scales == pytest.approx({0: 0.5, 1: 0.5})
    assert fake.placed == [["cpu@0"]]  # the class's first device only


def test_a_device_that_cannot_run_every_operator_or_an_offline_box_is_not_scaled(mlp, cores):
    names = [d.name for d in cores]
    dcg = planner.dcg_of(OpGraph.from_module(mlp.mod), names, {names[1]: {"relax.matmul"}})
    costs = _costs(dcg, [1e-3, 1e-3])
    fake = FakeProfiler(LocalRunner(), [2 * len(dcg.ops) * 1e-3])
    assert planner.fused_scales(mlp, cores, dcg, costs, fake) == pytest.approx({0: 2.0})
    offline = FakeProfiler(OfflineRunner.__new__(OfflineRunner), [1.0, 1.0])
    assert planner.fused_scales(mlp, cores, dcg, costs, offline) == {}
    assert offline.placed == []


def test_plan_with_runs_prices_each_device_at_its_fused_run(tmp_path, mlp, cores, monkeypatch):
    """Measured for real: each device's operators sum to the fused run of the model on it that
    the profile database then holds, their unfused sum scaled within the limits (this tiny
    model's kernels sum to several times its fused run: the instrument's own time)."""
    profiler = profiler_for(tmp_path / "db.jsonl")
    monkeypatch.setattr(planner, "FUSED_PRICES", False)
    unfused = planner.plan_with_runs(mlp, cores, profiler=profiler)
    monkeypatch.setattr(planner, "FUSED_PRICES", True)
    result = planner.plan_with_runs(mlp, cores, profiler=profiler)  # the same profiling runs
    low, high = planner.FUSED_SCALE_LIMITS
    misses = profiler.misses
    run_s = alone_seconds(profiler, mlp, cores[0])  # the record the planner made: one run
    assert profiler.misses == misses  # for the two alike cores
    for d in range(len(cores)):
        raw = sum(unfused.costs.node[o][d] for o in unfused.dcg.ops)
        got = sum(result.costs.node[o][d] for o in result.dcg.ops)
        assert got == pytest.approx(raw * min(high, max(low, run_s / raw)), rel=1e-6)
        assert got != pytest.approx(raw, rel=1e-3)
