"""DUET's phases: known shapes, and properties on random DAGs (cover once, respect every edge)."""

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_hetero.plan.phases import Phase, phases


def _dag(edges, nodes=()):
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    return g


def test_fork_join_gives_a_multi_path_phase_between_sequential_ones():
    g = _dag([("a", "b1"), ("b1", "b2"), ("a", "c1"), ("b2", "j"), ("c1", "j"), ("j", "z")])
    assert phases(g, ["a", "b1", "b2", "c1", "j", "z"]) == [
        Phase((("a",),)),
        Phase((("b1", "b2"), ("c1",))),
        Phase((("j", "z"),)),
    ]


def test_branches_from_separate_inputs_and_a_residual_block_that_stays_sequential():
    # wide-and-deep: branches start at the inputs; a skip edge inside one piece is not a fork
    g = _dag([("w", "m"), ("r1", "r2"), ("r1", "add"), ("r2", "add"), ("add", "m")])
    assert phases(g, ["w", "r1", "r2", "add", "m"]) == [
        Phase((("w",), ("r1", "r2", "add"))),
        Phase((("m",),)),
    ]


def test_nested_fork_stays_inside_its_branch_one_level_deep():
    edges = [("s", "a"), ("a", "a1"), ("a", "a2"), ("a1", "aj"), ("a2", "aj"), ("s", "b")]
    edges += [("aj", "j"), ("b", "j")]
    got = phases(_dag(edges), ["s", "a", "a1", "a2", "aj", "b", "j"])
    assert got[1] == Phase((("a", "a1", "a2", "aj"), ("b",)))


def test_a_chain_is_one_sequential_phase_and_independent_outputs_are_branches():
    assert phases(_dag([("x", "y"), ("y", "z")])) == [Phase((("x", "y", "z"),))]
    assert phases(_dag([], ["p", "q"])) == [Phase((("p",), ("q",)))]
    assert phases(_dag([])) == []


@st.composite
def random_dags(draw):
    n = draw(st.integers(1, 14))
    edges = [
        (f"n{i}", f"n{j}")
        for j in range(n)
        for i in range(j)
        if draw(st.floats(0, 1)) < draw(st.sampled_from([0.15, 0.3, 0.6]))
    ]
    return _dag(edges, [f"n{i}" for i in range(n)]), [f"n{i}" for i in range(n)]


@given(random_dags())
@settings(max_examples=300, deadline=None)
def test_phases_cover_every_node_once_and_respect_every_edge(case):
    dag, order = case
    got = phases(dag, order)
    seen = [n for p in got for n in p.nodes]
    assert sorted(seen) == sorted(order)  # each node exactly once
    phase_of = {n: i for i, p in enumerate(got) for n in p.nodes}
    branch_of = {n: (i, k) for i, p in enumerate(got) for k, b in enumerate(p.branches) for n in b}
    for u, v in dag.edges:
        assert phase_of[u] <= phase_of[v], (u, v, got)
        if phase_of[u] == phase_of[v]:  # inside a phase, only inside one branch
            assert branch_of[u] == branch_of[v], (u, v, got)
    for p in got:
        for b in p.branches:
            assert list(b) == sorted(b, key=order.index)
