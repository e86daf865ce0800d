import time

import numpy as np
import pytest

from tvm_hetero import api
from tvm_hetero.costmodel.transfer import fit_transfer
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.ir.workloads import op_module, partition_dims, workload_key
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.model_run import per_op_times
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.records import RecordKind
from tvm_hetero.runtime.instrument import KernelTimer
from tvm_hetero.runtime.measure import (
    QUOTA_WINDOW_MS,
    MeasureConfig,
    choose_number,
    for_device,
    serves,
)
from tvm_hetero.schedules.cpu import RULES_VERSION
from tvm_hetero.zoo import load_zoo_model

FAST = MeasureConfig(repeat=3, min_repeat_ms=1)


@pytest.fixture(scope="module")
def bert():
    return load_zoo_model("bert-small:tiny")


def test_identical_workloads_are_measured_once(tmp_path, bert, two_cpus):
    graph = OpGraph.from_module(bert.mod)
    distinct = {workload_key(op_module(bert.mod, n.node_id)) for n in graph.nodes}
    assert len(distinct) < len(graph.nodes)  # two identical layers
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=FAST)
    records = profiler.profile_ops(bert.mod, two_cpus[0])
    assert set(records) == {n.node_id for n in graph.nodes}
    assert profiler.misses == len(distinct)
    r = records["matmul"]
    assert r.kind is RecordKind.OP and r.repeat == 3 and len(r.samples_s) == 3 and r.number >= 1
    assert r.fingerprint["threads"] == two_cpus[0].threads and r.mode == f"rules:v{RULES_VERSION}"
    assert all(s > 0 for s in r.samples_s)
    again = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=FAST)
    again.profile_ops(bert.mod, two_cpus[0])
    assert (again.misses, again.hits) == (0, len(graph.nodes))


def test_a_stored_timing_serves_requests_no_longer_than_it_was_measured(tmp_path, bert, two_cpus):
    ask = MeasureConfig(repeat=3, min_repeat_ms=20)
    assert serves(ask, samples=3, number=10, median_s=1e-4, asked_ms=20)
    assert not serves(ask, samples=3, number=1000, median_s=1e-4, asked_ms=10)
    assert not serves(ask, samples=2, number=10, median_s=1e-4, asked_ms=20)
    assert serves(ask, samples=3, number=ask.max_number, median_s=1e-9, asked_ms=1)
    # stored before requests were kept: by how long the samples lasted (10 ms, 1 ms)
    assert serves(ask, samples=3, number=100, median_s=1e-4)
    assert not serves(ask, samples=3, number=10, median_s=1e-4)
    quota = for_device(FAST, cpu_quota=0.4)
    assert quota.min_repeat_ms == QUOTA_WINDOW_MS and quota.repeat == 3
    assert for_device(FAST, cpu_quota=None) is FAST
    Profiler(ProfileDB(tmp_path / "p.jsonl"), config=FAST).profile_ops(bert.mod, two_cpus[0])
    longer = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=ask)
    records = longer.profile_ops(bert.mod, two_cpus[0])
    assert longer.misses > 0  # 1 ms samples do not serve 20 ms ones: measured again
    assert all(r.extra["sample_ms"] == 20 for r in records.values())


def test_adaptive_number():
    assert choose_number(1e-6, MeasureConfig(min_repeat_ms=10)) == 10_000
    assert choose_number(1e-3, MeasureConfig(min_repeat_ms=10)) == 10
    assert choose_number(1.0, MeasureConfig(min_repeat_ms=10)) == 1
    with pytest.raises(ValueError, match="repeat and max_number must be >= 1"):
        MeasureConfig(repeat=0)


def test_sweep_along_matmul_dimensions(tmp_path, bert, two_cpus):
    dims = partition_dims(op_module(bert.mod, "matmul"))
    assert set(dims) == {"M", "N", "K", "batch"}
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=FAST)
    points = profiler.sweep(bert.mod, "matmul", dims["N"], [8, 32, 96], two_cpus[0])
    assert [s for s, _ in points] == [8, 32, 96]
    assert points[0][1].workload["outputs"][0][0] == [1, 8, 8]
    assert len({r.workload_key for _, r in points}) == 3


def test_subgraph_and_transfer(tmp_path, bert, two_cpus):
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=FAST)
    sub = profiler.profile_subgraph(bert.mod, ["matmul", "add1"], two_cpus[0])
    assert sub.kind is RecordKind.SUBGRAPH and sub.workload["ops"] == ["relax.matmul", "relax.add"]
    records = profiler.profile_transfer(two_cpus[0], two_cpus[1], [1 << 10, 1 << 14, 1 << 18])
    assert [r.workload["bytes"] for r in records] == [1 << 10, 1 << 14, 1 << 18]
    fit = fit_transfer([r.workload["bytes"] for r in records], [r.median_s for r in records])
    assert fit.latency_s >= 0 and fit.bandwidth_bps > 0


def test_transfer_fit_recovers_a_link():
    sizes = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    fit = fit_transfer(sizes, 5e-6 + sizes / 2e9)
    assert fit.latency_s == pytest.approx(5e-6, rel=1e-6)
    assert fit.bandwidth_bps == pytest.approx(2e9, rel=1e-6)
    with pytest.raises(ValueError, match="two or more distinct sizes"):
        fit_transfer([1, 1], [1, 1])


def test_whole_model_percentiles(tmp_path, bert, two_cpus):
    placed = api.place(bert, two_cpus[:1], api.Placement(("cpu",)))
    rec = Profiler(ProfileDB(tmp_path / "p.jsonl")).profile_model(placed, two_cpus[:1], repeat=20)
    assert rec.kind is RecordKind.MODEL and rec.repeat == 20 and rec.number == 1
    assert rec.percentile_s(50) <= rec.percentile_s(99) <= rec.percentile_s(99.9)


def test_per_operator_times_of_one_run(bert, two_cpus):
    placement = api.placement_from_rules(bert, two_cpus, {"matmul": "cpu:1"})
    placed = api.place(bert, two_cpus, placement)
    # one run: its operators lie within its wall time (medians over several runs need not:
    # the operators' medians summed past the median wall, 22.8 ms against 20.0, on a busy host)
    times = per_op_times(placed, api.ordered_args(bert.inputs, bert.random_inputs()), runs=1)
    ops = {n.node_id for n in OpGraph.from_module(bert.mod).nodes}
    kernels = {n for n in ops if OpGraph.from_module(bert.mod).node(n).op not in ("relax.reshape",)}
    # reshapes run in place; transposes of weights are folded at compile time
    assert kernels <= set(times.node_seconds) | {n for n in ops if "reshape" in n or "permute" in n}
    copies = [n for n in times.node_seconds if n not in ops]
    assert copies  # the to_vdevice copies of the placement are timed too
    assert 0 < times.total_s <= times.wall_s


def test_a_cpu_quota_is_part_of_the_fingerprint():
    import dataclasses

    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.timer import LocalRunner

    spec = cpu_device(0)
    plain = LocalRunner().fingerprint(spec)
    half = LocalRunner().fingerprint(dataclasses.replace(spec, cpu_quota=0.5))
    fifth = LocalRunner().fingerprint(dataclasses.replace(spec, cpu_quota=0.2))
    assert len({plain.key, half.key, fifth.key}) == 3
    assert "(cpu quota" not in plain.name and "0.5 cores" in half.name


class _SlowGpu:
    """An accelerator whose queued work takes 20 ms to finish (what ``sync`` waits for)."""

    def __init__(self) -> None:
        self.syncs = 0

    def sync(self) -> None:
        self.syncs += 1
        time.sleep(0.02)


def test_per_operator_timer_waits_for_the_accelerator_around_each_call():

    gpu = _SlowGpu()
    recorder = KernelTimer({"matmul_cuda": ["mm"]}, [gpu])
    recorder(None, "matmul_cuda", True, None)  # before: finish what was queued, then start
    recorder(None, "matmul_cuda", False, None)  # after: the kernel's own time includes its wait
    recorder.finish_run()
    assert gpu.syncs == 2
    assert recorder.samples["mm"][0] >= 0.02  # a launch-only timer would read microseconds
    recorder(None, "other_kernel", True, None)  # kernels of no operator are not timed
    assert gpu.syncs == 2
