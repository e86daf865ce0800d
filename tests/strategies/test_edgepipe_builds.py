"""EdgePipe on real builds: layers of zoo models, plans measured on two CPU workers and on
remote workers, pipelined runs that give the single-device build's numbers for every
microbatch, memory caps that no single device meets."""

import dataclasses
from math import inf

import numpy as np
import pytest
from conftest import remote_cpus

from tvm_hetero import api
from tvm_hetero.costmodel.transfer import TransferFit
from tvm_hetero.devices import ClusterSpec, resolve_device
from tvm_hetero.devices.spec import DeviceSpec, Link
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan import edgepipe
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.stats import pipeline_stats
from tvm_hetero.strategies.edgepipe import planner as strategy


@pytest.fixture(scope="module")
def workers():
    return [resolve_device("cpu@0"), resolve_device("cpu@1")]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """One profile database for the module: a layer measured once serves every test."""
    return tmp_path_factory.mktemp("edgepipe") / "profiles.jsonl"


def _crossing(graph: OpGraph, layers: strategy.Layers, k: int) -> set[str]:
    """Tensors made in layers 0..k and read after them."""
    before = {op for lay in layers.ops[: k + 1] for op in lay}
    return {
        name for u, v, name in graph.graph.edges(keys=True) if u in before and v not in before
    }  # fmt: skip


@pytest.mark.parametrize("name", ["vit-base:tiny", "bert-small:tiny", "resnet18:tiny"])
def test_layers_cover_every_operator_once_and_cut_where_one_tensor_crosses(name):
    graph = OpGraph.from_module(load_model(name).mod)
    layers = strategy.pipeline_layers(graph)
    ops = [op for lay in layers.ops for op in lay]
    assert sorted(ops) == sorted(graph.topo_order()) and len(layers) > 3
    for k in range(len(layers) - 1):
        crossing = _crossing(graph, layers, k)
        assert len(crossing) == 1, (k, crossing)
        (tensor,) = crossing
        assert layers.out_bytes[k] == next(
            d["bytes"] for _, _, n, d in graph.graph.edges(keys=True, data=True) if n == tensor
        )
    assert sum(layers.weight_bytes) == sum(n.param_bytes for n in graph.nodes)


def test_hand_placed_marks_are_the_only_cuts():
    from tvm import relax

    from tvm_hetero._compat import TensorType
    from tvm_hetero.ir.markers import stage_boundary

    bb = relax.BlockBuilder()
    x = relax.Var("x", TensorType((2, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for k in range(6):
                h = bb.emit(relax.op.nn.relu(relax.op.add(h, h)))
                if k in (1, 3):
                    h = bb.emit(stage_boundary(h))
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    model = load_model(bb.get(), name="marked-chain")
    layers = strategy.pipeline_layers(OpGraph.from_module(model.mod))
    assert layers.marked and len(layers) == 3
    assert [len(lay) for lay in layers.ops] == [5, 5, 4]  # each mark closes its layer


def test_links_follow_the_cluster_and_refuse_unjoined_devices():
    devs = [
        dataclasses.replace(resolve_device("cpu"), name=n, host=f"127.0.0.1:{9000 + i}")
        for i, n in enumerate("abcd")
    ]  # fmt: skip
    ring = ClusterSpec(
        tuple(devs),
        (Link("a", "b", 100, 1), Link("b", "c", 10, 2), Link("c", "d", 1000, 0),
         Link("d", "a", 50, 0)),
        "ring",
    )  # fmt: skip
    bw, lat = strategy.link_table(devs, ring)
    assert bw[0][1] == 100e6 / 8 and lat[0][1] == 1e-3
    assert [(ln.a, ln.b) for ln in ring.route("a", "c")] == [("a", "b"), ("b", "c")]
    assert bw[0][2] == 10e6 / 8 and lat[0][2] == pytest.approx(3e-3)  # a-b-c: the slowest
    assert bw[3][1] == 10e6 / 8 and lat[3][1] == pytest.approx(2e-3)  # d-c-b (c-d listed first)
    with pytest.raises(ValueError, match="no link joins a and b"):
        strategy.link_table(devs[:2], None)


def test_local_links_are_the_runtimes_crossings(workers, db):
    # two workers of one process: free until measured, then the runtime's handoff (no copy);
    # a GPU beside the CPU: the crossing's fitted line (it is not free: 39-41 us on the H200 box)
    assert strategy.link_table(workers, None) == ([[inf, inf], [inf, inf]], [[0.0, 0.0]] * 2)
    local = strategy.crossings(workers, strategy.profiler_for(db), local_only=True)
    assert sorted(local) == [(0, 1), (1, 0)]
    bw, lat = strategy.link_table(workers, None, local)
    assert bw[0][1] == bw[1][0] == inf and lat[0][1] == local[(0, 1)].latency_s > 0
    gpu = DeviceSpec("cuda:0", "cuda", {"kind": "cuda", "arch": "sm_90"}, index=0)
    fit = TransferFit(60e-6, 20e9, 0.0)
    bw, lat = strategy.link_table([workers[0], gpu], None, {(0, 1): fit, (1, 0): fit})
    assert bw[0][1] == 20e9 and lat[1][0] == 60e-6


def test_pipelined_run_matches_the_single_device_build_for_every_microbatch(workers, db):
    model = load_model("vit-base:tiny")
    result = strategy.plan_with_measurements(model, workers, db=db)
    plan = result.plan
    assert plan.period_s == result.partition.period_s == edgepipe.brute_force(result.problem)
    compiled = api.compile(model, api.in_plan_order(workers, plan), plan)
    assert len(compiled.deployment.units) == len(plan.stages)
    rng = np.random.default_rng(0)
    feeds = [{s.name: s.random(rng) for s in compiled.deployment.inputs} for _ in range(5)]
    with Executor(api.compile(model, workers[:1]).deployment) as one:
        want = [one.run(f) for f in feeds]
    with Executor(compiled.deployment) as ex:
        results = ex.run_many([ex.place_inputs(f) for f in feeds])
        stats = pipeline_stats(ex.timeline, ex.finished_s)
    for w, r in zip(want, results, strict=True):
        for a, b in zip(w, ex.outputs_of(r), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert stats.microbatches == 5 and len(stats.latency_s) == 5
    # every stage works on the oldest microbatch it has input for: in order, per worker
    for worker in plan.devices:
        order = [
            e.microbatch for e in ex.timeline.events if e.worker == worker and e.kind == "unit"
        ]
        assert order == sorted(order)


def test_a_model_no_device_holds_is_split_and_single_devices_are_refused(workers, db):
    model = load_model("vit-base:tiny")
    free = strategy.plan_with_measurements(model, workers, db=db).problem
    last = free.n_layers - 1
    # the least memory a two-stage split needs: below what the whole model needs
    cap = min(
        max(free.stage_bytes(0, k), free.stage_bytes(k + 1, last)) for k in range(last)
    )  # fmt: skip
    assert cap < free.stage_bytes(0, last)
    small = [dataclasses.replace(w, memory_bytes=cap) for w in workers]
    result = strategy.plan_with_measurements(model, small, db=db)
    assert len(result.plan.stages) == 2
    assert all(m <= cap for m in result.plan.memory_bytes)
    for d in range(2):
        assert not edgepipe.evaluate(result.problem, [(0, last, d)]).feasible
    with pytest.raises(ValueError, match="no partition fits"):
        strategy.plan_with_measurements(model, small[:1], db=db)


def test_pipelined_run_over_remote_workers_matches(start_workers):
    edges = remote_cpus(start_workers(3))
    cluster = ClusterSpec.uniform(edges, "mesh", 1000.0)
    model = load_model("bert-small:tiny")
    layers = strategy.pipeline_layers(OpGraph.from_module(model.mod))
    bandwidth, latency = strategy.link_table(edges, cluster)
    zero = [[0.0] * len(layers) for _ in edges]
    problem = strategy.problem_of(layers, zero, edges, bandwidth, latency)
    # three stages over the three workers, so data flows worker to worker
    thirds = edgepipe.even_split(len(layers), 3)
    part = edgepipe.evaluate(problem, [(a, b, d) for d, (a, b) in enumerate(thirds)])
    plan = strategy.to_plan(layers, problem, part, "gpipe")
    compiled = api.compile(model, api.in_plan_order(edges, plan), plan)
    rng = np.random.default_rng(2)
    feeds = [{s.name: s.random(rng) for s in compiled.deployment.inputs} for _ in range(4)]
    want = [api.run(api.compile(model, [resolve_device("cpu")]), f) for f in feeds]
    with Executor(compiled.deployment, timeout_s=30) as ex:
        for _ in range(2):  # the second batch receives into the first one's tensors
            results = ex.run_many([ex.place_inputs(f) for f in feeds])
            for w, r in zip(want, results, strict=True):
                for a, b in zip(w, ex.outputs_of(r), strict=True):
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
            # each microbatch ends when its last step ended on any worker, though each worker
            # answers once for all of them (they all ended with the last answer before: a
            # steady rate of hundreds of thousands a second). A remote worker's times are on
            # the client's clock from when its call began there, so two workers' may be a
            # client thread's wake-up apart (1 ms on a loaded host): the last stage's ends
            # bound each microbatch's from below, and the first microbatch ends before the last
            last_stage = [e for e in ex.timeline.events if e.worker == plan.devices[-1]]
            ends = [max(e.end_s for e in last_stage if e.microbatch == k) for k in range(4)]
            assert all(f >= e for f, e in zip(ex.finished_s, ends, strict=True)), ex.finished_s
            assert ex.finished_s[0] < ex.finished_s[-1], ex.finished_s
