import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_hetero.plan.als import (
    CostError,
    Costs,
    als_assignment,
    brute_force,
    exact_assignment,
    priority_assignment,
    total_time,
)
from tvm_hetero.plan.dcg import END, START, CGEdge, build_dcg
from tvm_hetero.plan.profiling_paths import node_runs, profiling_runs

DEVICES = ("cpu_p", "cpu_s", "pim")
PIM_OPS = frozenset({"relax.matmul", "relax.add"})


def _graph(n_ops: int, seed: int, chain: bool, n_devices: int = 3, restrict: bool = True):
    """A random operator graph with costs: a chain, or a DAG with branches and joins."""
    rng = random.Random(seed)
    types = ["relax.matmul", "relax.add", "relax.nn.gelu", "relax.nn.softmax"]
    ops = [(f"op{i}", rng.choice(types)) for i in range(n_ops)]
    sizes = [64, 256, 1024]
    edges = [CGEdge(START, "op0", "float32", rng.choice(sizes))]
    for i in range(1, n_ops):
        srcs = {i - 1} if chain else set(rng.sample(range(i), k=min(i, rng.randint(1, 2))))
        edges += [CGEdge(f"op{s}", f"op{i}", "float32", rng.choice(sizes)) for s in sorted(srcs)]
    edges.append(CGEdge(f"op{n_ops - 1}", END, "float32", rng.choice(sizes)))
    devices = DEVICES[:n_devices]
    capability = {"pim": PIM_OPS} if restrict and n_devices == 3 else None
    dcg = build_dcg(ops, edges, devices, capability)
    node = {o: {d: rng.uniform(1e-4, 1e-3) for d in dcg.capable[o]} for o in dcg.ops}
    edge = {k: rng.uniform(1e-5, 8e-4) for k in dcg.da_edges()}
    return dcg, Costs(node, edge)


def test_dcg_sizes_and_da_edges():
    ops = [("a", "relax.matmul"), ("b", "relax.nn.gelu"), ("c", "relax.matmul")]
    edges = [CGEdge(START, "a", "float32", 8), CGEdge("a", "b", "float32", 8),
             CGEdge("b", "c", "float32", 8), CGEdge("c", END, "float32", 4)]  # fmt: skip
    dcg = build_dcg(ops, edges, ["cpu", "pim"], {"pim": frozenset({"relax.matmul"})})
    assert dcg.capable == {"a": (0, 1), "b": (0,), "c": (0, 1)}
    sizes = dcg.sizes()
    assert sizes["cg_nodes"] == 3 and sizes["dcg_nodes"] == 5 + 2
    # a->b and b->c carry the same attributes: one DA edge per direction
    keys = {(k.src, k.dst, k.elements) for k in dcg.da_edges()}
    assert keys == {(0, 1, 8), (1, 0, 8), (1, 0, 4)}
    with pytest.raises(ValueError, match="home device 'cpu' must run every operator"):
        build_dcg(ops, edges, ["cpu", "pim"], {"cpu": frozenset()})


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000), devs=st.integers(2, 3))
def test_als_is_optimal_on_chains(n, seed, devs):
    dcg, costs = _graph(n, seed, chain=True, n_devices=devs)
    assignment, t = als_assignment(dcg, costs)
    _, best = brute_force(dcg, costs)
    assert t == pytest.approx(best, rel=1e-9)
    assert all(assignment[o] in dcg.capable[o] for o in dcg.ops)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000), devs=st.integers(2, 3))
def test_exact_is_optimal_on_dags_and_als_never_beats_it(n, seed, devs):
    dcg, costs = _graph(n, seed, chain=False, n_devices=devs)
    exact, t_exact = exact_assignment(dcg, costs)
    _, best = brute_force(dcg, costs)
    assert t_exact == pytest.approx(best, rel=1e-7)
    assert total_time(dcg, costs, exact) == pytest.approx(t_exact)
    _, t_als = als_assignment(dcg, costs)
    assert t_als >= t_exact - 1e-12


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 8), seed=st.integers(0, 10_000), chain=st.booleans(), devs=st.integers(2, 3)
)
def test_profiling_runs_cover_every_da_edge(n, seed, chain, devs):
    dcg, _ = _graph(n, seed, chain=chain, n_devices=devs)
    runs = profiling_runs(dcg)
    covered = set().union(*(dcg.covered(r.assignment) for r in runs))
    assert covered == dcg.da_edges()
    assert len(runs) >= len(dcg.devices)
    for r in runs:
        assert all(r.assignment[o] in dcg.capable[o] for o in dcg.ops)


def test_profiling_runs_are_minimal_on_small_graphs():
    """On small graphs the runs after the node runs match the fewest a brute-force search needs."""
    for seed in range(15):
        dcg, _ = _graph(4, seed, chain=seed % 2 == 0, n_devices=2)
        base = node_runs(dcg)
        missing = dcg.da_edges() - set().union(*(r.new_da_edges for r in base))
        extra = len(profiling_runs(dcg)) - len(base)
        assignments = [
            dict(zip(dcg.ops, devs, strict=True))
            for devs in itertools.product(*(dcg.capable[o] for o in dcg.ops))
        ]
        fewest = next(
            k for k in range(len(missing) + 1)
            if any(missing <= set().union(set(), *(dcg.covered(a) for a in combo))
                   for combo in itertools.combinations(assignments, k))
        )  # fmt: skip
        assert extra == fewest, seed


def test_priority_baseline_and_missing_costs():
    dcg, costs = _graph(5, 3, chain=True)
    pim_first = priority_assignment(dcg, [2, 0, 1])
    assert all(pim_first[o] == (2 if 2 in dcg.capable[o] else 0) for o in dcg.ops)
    with pytest.raises(CostError, match="no cost for"):
        als_assignment(dcg, Costs(costs.node, {}))


def test_guard_keeps_the_best_baseline_when_the_gain_is_small():
    from tvm_hetero.plan.als import best_priority_assignment
    from tvm_hetero.strategies.als.planner import plan_als

    for seed in range(20):
        dcg, costs = _graph(6, seed, chain=True, n_devices=2, restrict=False)
        optimum = plan_als(dcg, costs)
        base_assignment, base_s = best_priority_assignment(dcg, costs)
        gain = 1 - optimum.predicted_s / base_s
        guarded = plan_als(dcg, costs, min_gain=0.05)
        if gain < 0.05:
            assert guarded.strategy == "als-guarded" and guarded.predicted_s == base_s
            assert {o: d for o, d in base_assignment.items() if d} == dict(guarded.assignment)
        else:
            assert guarded == optimum
    with pytest.raises(ValueError, match="min_gain"):
        plan_als(dcg, costs, min_gain=1.0)


def test_a_da_edge_no_run_performed_costs_the_nearest_measured_copy():
    from tvm_hetero.plan.dcg import DAKey
    from tvm_hetero.strategies.als.planner import nearest_copy_s

    measured = {DAKey(0, 1, "float32", 100): 1.0, DAKey(0, 1, "float32", 1000): 2.0,
                DAKey(1, 0, "float32", 10): 3.0}  # fmt: skip
    assert nearest_copy_s(DAKey(0, 1, "int64", 3), measured) == 1.0  # 24 bytes: nearest 400
    assert nearest_copy_s(DAKey(0, 1, "float16", 1500), measured) == 2.0  # 3000 bytes
    assert nearest_copy_s(DAKey(1, 0, "float32", 10**6), measured) == 3.0  # same direction
    assert nearest_copy_s(DAKey(2, 0, "float32", 10), measured) == 3.0  # no copy that way
    assert nearest_copy_s(DAKey(0, 1, "float32", 10), {}) == 0.0
