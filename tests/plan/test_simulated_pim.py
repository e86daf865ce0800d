"""The simulated PIM device: published speedups applied to measured serial-CPU costs."""

import pytest

from tvm_hetero.costmodel.simulated_pim import pim_speedup, with_simulated_pim
from tvm_hetero.plan.als import Costs, brute_force, check_costs, exact_assignment
from tvm_hetero.plan.dcg import END, START, CGEdge, DAKey, build_dcg


def test_speedups_are_the_published_ones_interpolated_and_clamped():
    assert pim_speedup("relax.matmul", 8) == pytest.approx(10.4)
    assert pim_speedup("relax.matmul", 64) == pytest.approx(5.6)
    assert pim_speedup("relax.matmul", 36) == pytest.approx(8.0)
    assert pim_speedup("relax.add", 8) == pytest.approx(3.4)
    assert pim_speedup("relax.add", 128) == pytest.approx(2.1)  # clamped to the range


def test_pim_costs_fill_the_dcg_and_the_optimum_is_found():
    ops = [("a", "relax.matmul"), ("b", "relax.nn.softmax"), ("c", "relax.add")]
    edges = [CGEdge(START, "a", "float32", 64), CGEdge("a", "b", "float32", 64),
             CGEdge("b", "c", "float32", 64), CGEdge("c", END, "float32", 64)]  # fmt: skip
    pim_ops = frozenset({"relax.matmul", "relax.add"})
    dcg = build_dcg(ops, edges, ["cpu", "cpu-serial", "pim"], {"pim": pim_ops})
    measured = Costs(
        {"a": {0: 2.0, 1: 5.2}, "b": {0: 1.0, 1: 1.0}, "c": {0: 0.5, 1: 0.34}},
        {DAKey(0, 1, "float32", 64): 0.01, DAKey(1, 0, "float32", 64): 0.02},
    )
    costs = with_simulated_pim(dcg, dict(ops), measured, pim=2, serial=1, seq_len=8)
    check_costs(dcg, costs)  # every capable (op, device) and every DA edge has a cost
    assert costs.node["a"][2] == pytest.approx(5.2 / 10.4)
    assert costs.node["c"][2] == pytest.approx(0.34 / 3.4)
    assert 2 not in costs.node["b"]
    assert costs.edge[DAKey(0, 2, "float32", 64)] == pytest.approx(0.01)  # as cpu -> cpu-serial
    assert costs.edge[DAKey(2, 0, "float32", 64)] == pytest.approx(0.02)
    assert measured.node["a"] == {0: 2.0, 1: 5.2}  # input untouched
    assert exact_assignment(dcg, costs)[1] == pytest.approx(brute_force(dcg, costs)[1])
