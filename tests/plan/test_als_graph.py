from tvm_hetero.cli.main import main
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.profiling_paths import profiling_runs
from tvm_hetero.strategies.als import PIM_OPS, dcg_of
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
