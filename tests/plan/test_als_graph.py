import pytest

from tvm_hetero.cli.main import main
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.profiling_paths import profiling_runs
from tvm_hetero.strategies.als.planner import PIM_OPS, dcg_of
from tvm_hetero.zoo import load_zoo_model


def test_dcg_of_a_zoo_model_and_its_profiling_runs():
    graph = OpGraph.from_module(load_zoo_model("gpt2:tiny").mod)
    dcg = dcg_of(graph, ["cpu_p", "cpu_s", "pim"], {"pim": PIM_OPS})
    sizes = dcg.sizes()
    assert sizes["cg_nodes"] == graph.graph.number_of_nodes()
    inputs = sum(len(set(i.consumers)) for i in graph.inputs if not i.is_param)
    assert sizes["cg_edges"] == graph.graph.number_of_edges() + inputs + len(graph.outputs)
    pim_capable = sum(1 for n in graph.nodes if n.op in PIM_OPS)
    assert sizes["dcg_nodes"] == 2 * len(graph.nodes) + pim_capable + 2
    assert 0 < sizes["da_edges"] < sizes["dcg_edges"]  # equal attributes collapse
    runs = profiling_runs(dcg)
    assert set().union(*(dcg.covered(r.assignment) for r in runs)) == dcg.da_edges()
    assert [r.purpose for r in runs[:3]] == [
        "node costs of cpu_p",
        "node costs of cpu_s",
        "node costs of pim",
    ]


def test_profile_minimal_runs_cli(capsys):
    assert (
        main(
            [
                "profile",
                "bert-small:tiny",
                "--device",
                "cpu",
                "--device",
                "cpu:1",
                "--minimal-runs",
                "--pim",
                "cpu:1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Device-mapped graph of bert-small:tiny" in out and "profiling runs" in out
    assert main(["profile", "mlp:tiny", "--minimal-runs", "--pim", "cpu"]) == 2


def test_measured_costs_give_a_placement_that_runs(two_cpus, tmp_path):
    """Real profiling runs on two CPU vdevices -> every node and DA-edge cost -> ALS / MILP plans."""
    import numpy as np

    from tvm_hetero import api
    from tvm_hetero.plan.als import check_costs, priority_assignment, total_time
    from tvm_hetero.profiling.profiler import profiler_for
    from tvm_hetero.strategies.als.planner import measure_costs, plan_als
    from tvm_hetero.strategies.base import OutOfTime, SearchCosts

    model = load_zoo_model("mlp:tiny")
    graph = OpGraph.from_module(model.mod)
    names = [d.name for d in two_cpus]
    dcg = dcg_of(graph, names, {names[1]: PIM_OPS})
    runs = profiling_runs(dcg)
    profiler = profiler_for(tmp_path / "p.jsonl")
    costs = measure_costs(model, two_cpus, dcg, runs, profiler, repeats=1)
    assert profiler.misses == len(runs)  # one per-operator run each, stored
    assert measure_costs(model, two_cpus, dcg, runs, profiler, repeats=1) == costs
    assert profiler.hits == len(runs)  # and served the second time
    check_costs(dcg, costs)  # every capable (op, device) and every DA edge has a measured cost
    # in a search: the runs the database holds need no time; runs it lacks, priced by the
    # search's compile and runs, stop it before the first one where they would not fit
    slow = SearchCosts(compile_s=20.0, load_s={}, run_s={"cpu": 2.0})
    served = measure_costs(model, two_cpus, dcg, runs, profiler, repeats=1,
                           time_left=lambda: 0.5, costs=slow)  # fmt: skip
    assert served == costs
    empty = profiler_for(tmp_path / "empty.jsonl")
    need = len(runs) * (20.0 + 2 * 2.0)  # each a compile, a warm-up and one timed run
    with pytest.raises(
        OutOfTime, match=rf"its {len(runs)} profiling runs left would take {need:.0f} s"
    ):
        measure_costs(model, two_cpus, dcg, runs, empty, repeats=1,
                      time_left=lambda: need / 2 - 1, costs=slow)  # fmt: skip
    assert empty.misses == 0
    assert all(t >= 0 for per in costs.node.values() for t in per.values())
    for exact in (False, True):
        plan = plan_als(dcg, costs, exact=exact)
        assert plan.predicted_s == total_time(dcg, costs, {o: plan.device_of(o) for o in dcg.ops})
        for priority in ([0, 1], [1, 0]):
            assert (
                plan.predicted_s
                <= total_time(dcg, costs, priority_assignment(dcg, priority)) + 1e-12
            )
        inputs = model.random_inputs()
        got = api.run(api.compile(model, two_cpus, plan), inputs)
        np.testing.assert_allclose(
            got[0], api.reference_outputs(model, inputs, two_cpus[0])[0], rtol=1e-5, atol=1e-6
        )
    # confirmed by measurement: the kept plan is the one measured faster end to end
    from tvm_hetero.plan.placement import Placement
    from tvm_hetero.strategies.als.planner import confirm_by_measurement

    first = next(o for o in dcg.ops if 1 in dcg.capable[o])  # neither baseline moves just one
    moved = Placement(plan.devices, {first: 1}, "als", 1.0)
    kept, seconds = confirm_by_measurement(model, two_cpus, moved, dcg, costs)
    assert set(seconds) == {"plan", "baseline"}
    if kept.strategy == "als-fallback":
        assert seconds["baseline"] < seconds["plan"] and kept.assignment != moved.assignment
    else:
        assert kept == moved and seconds["plan"] <= seconds["baseline"]
