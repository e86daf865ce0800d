"""DUET on real builds: subgraphs of zoo, torch and random multi-branch models, compiled as units
of their own on two CPU workers, give the single-device build's numbers; the planner measures,
corrects and falls back."""

import json

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_hetero import api
from tvm_hetero._compat import TensorType
from tvm_hetero.devices import resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan import duet
from tvm_hetero.plan.registry import load_plan, save_plan
from tvm_hetero.strategies.duet import planner as strategy


@pytest.fixture(scope="module")
def workers():
    return [resolve_device("cpu@0"), resolve_device("cpu@1")]


def _matches_single_device(model, workers, assignment=None):
    """Compile ``model`` with every other subgraph on the second worker (or ``assignment``);
    check it against the one-device build and return the compiled plan."""
    dg = strategy.duet_graph(OpGraph.from_module(model.mod))
    assignment = assignment or tuple(s % 2 for s in range(len(dg.subgraphs)))
    plan = strategy.to_plan(dg, workers, assignment, "test")
    compiled = api.compile(model, api.in_plan_order(workers, plan), plan)
    if len(plan.devices) == 2:  # one unit per subgraph that computes something
        assert len(compiled.deployment.units) <= len(dg.subgraphs)
        assert len(compiled.deployment.units) >= len(set(dg.phase))
    inputs = model.random_inputs()
    ref = api.run(api.compile(model, workers[:1]), inputs)
    got = api.run(compiled, inputs)
    for r, g in zip(ref, got, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
    return dg


def _covers(model, dg):
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    assert sorted(n for s in dg.subgraphs for n in s) == sorted(ids)  # every operator once


@pytest.mark.parametrize(
    ("name", "branches"),
    [
        ("wide-deep:tiny", 4),
        ("siamese-lstm:tiny", 2),
        pytest.param("mt-dnn:tiny", 2, marks=pytest.mark.slow),  # 12 s; its towers: the others'
        ("resnet18:tiny", 2),
    ],
)
def test_zoo_subgraphs_cover_the_model_and_match_the_single_device_build(name, branches, workers):
    model = load_model(name)
    dg = _matches_single_device(model, workers)
    _covers(model, dg)
    widest = max(dg.phase.count(p) for p in set(dg.phase))
    assert widest == branches  # wide-deep's 4 towers, 2 LSTMs, mt-dnn's 2 heads, a downsample


def _random_multi_branch(seed: int) -> tvm.IRModule:
    """A random DAG of matmuls and element-wise ops with forks, joins and nested forks."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", TensorType((2, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            values = [x]
            for _ in range(int(rng.integers(6, 14))):
                a = values[int(rng.integers(len(values)))]
                kind = int(rng.integers(4))
                if kind == 0:
                    w = relax.const(rng.standard_normal((8, 8)).astype("float32") * 0.3)
                    v = bb.emit(relax.op.matmul(a, w))
                elif kind == 1:
                    b = values[int(rng.integers(len(values)))]
                    v = bb.emit(relax.op.add(a, b))
                elif kind == 2:
                    v = bb.emit(relax.op.tanh(a))
                else:
                    v = bb.emit(relax.op.nn.relu(relax.op.subtract(a, relax.const(0.1))))
                values.append(v)
            out = bb.emit_output(relax.op.concat(values[1:], axis=1))  # no dead branch
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_multi_branch_graphs_match(seed, workers):
    model = load_model(_random_multi_branch(seed), name=f"random{seed}")
    dg = _matches_single_device(model, workers)
    _covers(model, dg)


def test_a_torch_two_tower_recommender_plans_compiles_and_matches(tmp_path, workers):
    torch = pytest.importorskip("torch")

    class Tower(torch.nn.Module):
        def __init__(self, vocab: int, width: int):
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, 16)
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 8)
            )

        def forward(self, ids):
            return self.mlp(self.embed(ids).mean(dim=1))

    class TwoTower(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.user, self.item = Tower(50, 32), Tower(80, 24)

        def forward(self, user_ids, item_ids):
            return (self.user(user_ids) * self.item(item_ids)).sum(dim=1, keepdim=True)

    torch.manual_seed(0)
    net = TwoTower().eval()
    example = (torch.randint(0, 50, (2, 5)), torch.randint(0, 80, (2, 7)))
    model = load_model(net, example_args=example, name="two-tower")
    dg = _matches_single_device(model, workers)
    assert max(dg.phase.count(p) for p in set(dg.phase)) == 2  # the towers
    result = strategy.plan_with_measurements(
        model, workers, tmp_path / "p.jsonl", budget=3, repeat=5
    )
    _kept_is_measured_best(result)
    compiled = api.compile(model, api.in_plan_order(workers, result.plan), result.plan)
    inputs = {"user_ids": example[0].numpy(), "item_ids": example[1].numpy()}
    inputs = {i.name: a for i, a in zip(model.inputs, inputs.values(), strict=True)}
    np.testing.assert_allclose(
        api.run(compiled, inputs)[0], net(*example).detach().numpy(), rtol=1e-5, atol=1e-5
    )


def _kept_is_measured_best(result):
    """The plan kept is DUET's only when it measured faster than every single device."""
    best_single = min(result.singles.values())
    if result.plan.strategy == "duet":
        assert result.plan.measured_s < best_single
        assert len(result.plan.devices) == 2
    else:
        assert result.plan.strategy == "duet-fallback"
        assert result.plan.measured_s == best_single and len(result.plan.devices) == 1
    assert result.correction.trials[0][1] >= result.correction.seconds  # never worse than start


def test_plan_with_measurements_corrects_within_budget_and_round_trips(tmp_path, workers):
    model = load_model("siamese-lstm:tiny")
    result = strategy.plan_with_measurements(
        model, workers, tmp_path / "p.jsonl", budget=2, repeat=5
    )
    assert 1 <= len(result.correction.trials) <= 2
    assert set(result.singles) == {"cpu@0", "cpu@1", "cpu@0-1"}
    _kept_is_measured_best(result)
    db = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    # the towers differ only in their weights: one workload, measured once (and on one worker
    # for both: cpu@0 and cpu@1 are the same target), then the merge
    assert sum(r["kind"] == "subgraph" for r in db) == 2
    assert result.costs.seconds[0] == result.costs.seconds[1]
    path = save_plan(result.plan, api.model_id(model), tmp_path / "plan.json")
    again = load_plan(path, api.model_id(model))
    assert again == result.plan
    compiled = api.compile(model, api.in_plan_order(workers, again), again)
    inputs = model.random_inputs()
    ref = api.run(api.compile(model, workers[:1]), inputs)
    np.testing.assert_allclose(api.run(compiled, inputs)[0], ref[0], rtol=1e-5, atol=1e-5)
    # the costs it planned with: every subgraph on both workers, links measured
    assert all(len(row) == 2 and min(row) > 0 for row in result.costs.seconds)
    assert result.costs.links[(0, 1)].latency_s > 0
    assert duet.predicted_s(result.costs, result.correction.assignment) > 0


def test_place_stops_when_its_time_is_up_and_keeps_its_best_measured(tmp_path, workers):
    """With the time left at zero after two runs (the start and one move), no further run starts:
    two trials, no single device run that the correction had not run, and the plan kept is
    the faster trial (a split, or its device alone)."""
    model = load_model("siamese-lstm:tiny")
    profiler = strategy.profiler_for(tmp_path / "p.jsonl")
    dg, costs = strategy.measure_costs(model, workers, profiler)
    runs, run = [], profiler.profile_run
    profiler.profile_run = lambda *a, **k: runs.append(a) or run(*a, **k)
    result = strategy.place(
        model, workers, dg, costs, profiler, budget=12, repeat=3,
        time_left=lambda: 100.0 if len(runs) < 2 else 0.0,
    )  # fmt: skip
    trials = dict(result.correction.trials)
    assert len(trials) == 2 and result.cut_short
    alone = {(d,) * len(dg.subgraphs): w.name for d, w in enumerate(workers)}
    assert set(result.singles) == {alone[a] for a in trials if a in alone}
    assert result.plan.measured_s == min(trials.values())
    used = duet.devices_used(result.correction.assignment)
    assert len(result.plan.devices) == len(used)
    untimed = strategy.place(model, workers, dg, costs, profiler, budget=2, repeat=3)
    assert not untimed.cut_short and set(untimed.singles) == {"cpu@0", "cpu@1", "cpu@0-1"}


@pytest.mark.slow  # 41 s: keeps make test under 15 minutes; make test-slow runs it
def test_torchvision_googlenet_inception_branches_compile_and_match(workers):
    """GoogLeNet (torchvision, random weights) at 64x64: each inception module is a multi-path
    phase of four branches; every other subgraph on the second worker gives the same numbers."""
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    net = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False).eval()
    example = (torch.randn(1, 3, 64, 64),)
    model = load_model(net, example_args=example, name="googlenet")
    dg = _matches_single_device(model, workers)
    _covers(model, dg)
    widths = [dg.phase.count(p) for p in sorted(set(dg.phase))]
    assert widths.count(4) == 9  # the nine inception modules
