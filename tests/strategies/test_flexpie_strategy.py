"""FlexPie's strategy: traces this package measured, estimators trained on them, the DP's plan
compiled, run and equal to the whole model; its costs agree with the planner's evaluation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import conv_trace_row, remote_cpus
from tvm import relax, tirx
from tvm.target import Target

from tvm_hetero import api
from tvm_hetero.costmodel.estimators import (
    FEATURES,
    Estimator,
    _join_columns,
    _matrix,
    channel_vectorized,
    distinct_workloads,
    merge_repeats,
    topology,
    train,
)
from tvm_hetero.devices import resolve_device
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.errors import RunError
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.tiles import SCHEMES, even_parts
from tvm_hetero.ir.workloads import concat_module
from tvm_hetero.plan.flexpie import confirm_candidates, evaluate
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.runtime import remote_worker
from tvm_hetero.schedules.cpu import RULES_VERSION
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.schedules.cpu.injective import Injective
from tvm_hetero.strategies.flexpie import planner as strategy
from tvm_hetero.strategies.flexpie import traces as trace_collection
from tvm_hetero.strategies.flexpie.confirm import confirm_by_measurement
from tvm_hetero.strategies.flexpie.traces import (
    JOINS,
    SYNC_SIZES,
    collect,
    concat_layout,
    read_traces,
)
from tvm_hetero.zoo import load_zoo_model


@pytest.fixture(scope="module")
def devices():
    return [resolve_device("cpu@0"), resolve_device("cpu@1")]


@pytest.fixture(scope="module")
def trained(devices, tmp_path_factory):
    """Traces of resnet18:tiny's tiles on this machine's two cores, and estimators from them."""
    folder = tmp_path_factory.mktemp("flexpie")
    model = load_zoo_model("resnet18:tiny")
    joins = JOINS[::7]  # every axis and piece count
    counts = collect(
        [model], devices, folder / "t.jsonl", limit=16, db=folder / "db.jsonl", joins=joins
    )
    assert counts == {"compute": 16, "rearrange": len(joins), "sync": 2 * len(SYNC_SIZES)}
    found = read_traces(folder / "t.jsonl")
    estimators = {n: train(n, rows, secs, rounds=30) for n, (rows, secs) in found.items()}
    for e in estimators.values():
        e.save(folder / "est")
    return folder, strategy.Estimators.load(folder / "est")


def test_plan_builds_runs_and_equals_the_whole_model(devices, trained):
    folder, estimators = trained
    model = load_zoo_model("resnet18:tiny")
    result = strategy.plan_with_estimators(model, devices, None, estimators, folder / "db.jsonl")
    plan, problem = result.plan, result.problem
    assert plan.to_dict()["kind"] == "spatial" and plan.strategy == "flexpie"
    # traced just now: the kernels these builds run, so nothing to say of them
    lanes = str(int(strategy.device_features(devices[0])["lanes"]))
    assert estimators.compute.notes["rules"] == {lanes: RULES_VERSION} and result.stale is None
    index = {s: q for q, s in enumerate(SCHEMES)}
    again = evaluate(
        problem, [(s.start, s.stop, index[s.scheme]) for s in result.partition.segments]
    )
    assert again.predicted_s == pytest.approx(plan.predicted_s)
    assert all(plan.predicted_s <= b.predicted_s + 1e-12 for b in result.baselines.values())
    assert {"layerwise", "single", "fixed-InH", "fused-Grid"} <= set(result.baselines)
    head = problem.compute_s[len(result.geometry) - 1, 0]
    assert np.isfinite(head[index["Home"]]) and not np.isfinite(head[index["InH"]])
    for name, p in {"flexpie": plan, **result.baseline_plans(devices)}.items():
        if name not in ("flexpie", "fixed-Grid"):
            continue
        x = model.random_inputs()
        got = api.run(api.compile(model, devices, p), x)
        np.testing.assert_allclose(got[0], api.reference_outputs(model, x, devices[0])[0],
                                   rtol=1e-5, atol=1e-6)  # fmt: skip


def test_confirmation_keeps_the_plan_that_ran_fastest_end_to_end(devices, trained):
    folder, estimators = trained
    model = load_zoo_model("resnet18:tiny")
    result = strategy.plan_with_estimators(model, devices, None, estimators, folder / "db.jsonl")
    kept = confirm_by_measurement(result, model, devices, plans=2, repeat=5)
    timed = confirm_candidates(result.partitions(), 2)
    assert list(kept.confirmed_s) == timed and len(timed) >= 2
    cuts = {n: [(s.start, s.stop, s.scheme) for s in p.segments]
            for n, p in result.partitions().items()}  # fmt: skip
    assert cuts["single"] in [cuts[n] for n in timed]  # the home device alone is always timed
    assert kept.kept == min(timed, key=kept.confirmed_s.__getitem__)
    assert kept.partition == result.partitions()[kept.kept]
    want = "flexpie" if kept.kept == "flexpie" else f"flexpie-{kept.kept}"
    assert kept.plan.strategy == want
    assert kept.plan.schemes == tuple(s.scheme for s in kept.partition.segments)
    assert confirm_by_measurement(result, model, devices, plans=0) is result
    plan = api.plan(model, devices, "flexpie", estimators=estimators, db=folder / "db.jsonl",
                    confirm_plans=1)  # fmt: skip
    assert plan.strategy in ("flexpie", "flexpie-single")  # FlexPie's or the home device's


def test_confirmation_compiles_no_plan_past_its_time_left(devices, trained):
    """No compile after FlexPie's own starts past the time left: with none left FlexPie's plan
    is returned untimed; with time for one more, only the first two are timed."""
    folder, estimators = trained
    model = load_zoo_model("resnet18:tiny")
    result = strategy.plan_with_estimators(model, devices, None, estimators, folder / "db.jsonl")
    timed = confirm_candidates(result.partitions(), 3)
    assert len(timed) >= 3
    built = []

    def build(plan):
        built.append(plan.strategy)
        return api.compile(model, api.in_plan_order(devices, plan), plan).deployment

    none_left = confirm_by_measurement(
        result, model, devices, plans=3, repeat=3, build=build, time_left=lambda: 0.0
    )
    assert none_left is result and built == ["flexpie"]
    answers = iter([1e3])
    built.clear()
    one_more = confirm_by_measurement(
        result, model, devices, plans=3, repeat=3, build=build,
        time_left=lambda: next(answers, 0.0),
    )  # fmt: skip
    assert built == timed[:2] and list(one_more.confirmed_s) == timed[:2]
    # a compile leaves room for the first round of timing it and those before it: FlexPie's
    # plan priced 60 s a run (2 runs of its first turn: one to warm up, a round's one), 100 s
    # left: no second compile; at 30 s a run (60 s of the 100) there is room for one
    slow = dataclasses.replace(result.partition, gather_s=result.partition.gather_s + 60.0)
    built.clear()
    alone = confirm_by_measurement(
        dataclasses.replace(result, partition=slow), model, devices, plans=3, repeat=3,
        build=build, time_left=lambda: 100.0,
    )  # fmt: skip
    assert built == ["flexpie"] and not alone.confirmed_s
    slower = dataclasses.replace(result.partition, gather_s=result.partition.gather_s + 30.0)
    built.clear()
    answers = iter([100.0])  # then none left: no third compile
    confirm_by_measurement(
        dataclasses.replace(result, partition=slower), model, devices, plans=3, repeat=3,
        build=build, time_left=lambda: next(answers, 0.0),
    )  # fmt: skip
    assert built == timed[:2]


def test_a_search_prices_the_confirmation_s_compiles_and_loads_by_what_it_measured(
    devices, trained
):  # fmt: skip
    """With a search's costs FlexPie's own compile is priced too (the search's compile): a
    compile longer than the time left leaves the plan untimed and nothing compiled; and each
    turn is priced with its loads on the plan's devices: loads of 40 s a device leave 100 s
    no room for a second plan, which the same 100 s without them have."""
    from tvm_hetero.strategies.base import SearchCosts

    folder, estimators = trained
    model = load_zoo_model("resnet18:tiny")
    result = strategy.plan_with_estimators(model, devices, None, estimators, folder / "db.jsonl")
    timed = confirm_candidates(result.partitions(), 2)
    built = []

    def build(plan):
        built.append(plan.strategy)
        return api.compile(model, api.in_plan_order(devices, plan), plan).deployment

    def confirm(costs, left=100.0):
        built.clear()
        return confirm_by_measurement(result, model, devices, plans=2, repeat=3, build=build,
                                      time_left=lambda: left, costs=costs)  # fmt: skip

    assert confirm(SearchCosts(150.0, {})) is result and built == []
    assert confirm(SearchCosts(1.0, {})).confirmed_s and built == timed
    slow = SearchCosts(1.0, {d.name: 40.0 for d in devices})
    assert confirm(slow) is result and built == ["flexpie"]
    assert confirm(slow, left=1e3).confirmed_s and built == timed


def test_confirmation_times_no_round_past_its_time_left(devices, trained, monkeypatch):
    """The plans compiled, their timing gets the time left as its deadline: one round when none
    is left (a sample each of ``repeat=3`` over three rounds), and of it only the first two
    plans' turns; every round without a limit (fails with the rounds not given the deadline)."""
    from tvm_hetero.runtime import executor

    folder, estimators = trained
    model = load_zoo_model("resnet18:tiny")
    result = strategy.plan_with_estimators(model, devices, None, estimators, folder / "db.jsonl")
    timing, samples = executor.interleaved_run_seconds, []

    def recorded(*args, **kwargs):
        samples.append(timing(*args, **kwargs))
        return samples[-1]

    monkeypatch.setattr(executor, "interleaved_run_seconds", recorded)
    answers = iter([1e3])  # room for the second compile, then none for the rounds
    confirm_by_measurement(result, model, devices, plans=2, repeat=3,
                           time_left=lambda: next(answers, 0.0))  # fmt: skip
    confirm_by_measurement(result, model, devices, plans=2, repeat=3)
    answers = iter([1e3, 1e3])  # three compiled, none left for the rounds: two timed
    three = confirm_by_measurement(result, model, devices, plans=3, repeat=3,
                                   time_left=lambda: next(answers, 0.0))  # fmt: skip
    assert [len(s) for s in samples[0]] == [1, 1]  # the two compiled, one round
    assert {len(s) for s in samples[1]} == {3}
    assert [len(s) for s in samples[2]] == [1, 1, 0]
    assert list(three.confirmed_s) == confirm_candidates(result.partitions(), 3)[:2]


def test_a_tiled_segment_costs_what_its_probe_leaves_unpriced_in_its_scheme(devices, trained):
    """The probe (a conv chain, every layer a segment) is cut in each scheme, run on the
    workers once and kept; a scheme's per-segment term is its measured time less its price,
    over its segments; it is added to every segment tiled in that scheme and to no other."""
    folder, estimators = trained
    db = folder / "probe.jsonl"
    first = strategy.segment_seconds(devices, estimators, None, 1e-5, db)
    runs = [json.loads(line) for line in db.read_text().splitlines()]
    cutting = [s for s in SCHEMES if s != "Home"]
    assert sorted(first) == sorted(cutting) and len(runs) == len(cutting)
    assert all(r["workload"]["op"] == "run" and len(r["samples_s"]) == 30 for r in runs)
    assert strategy.segment_seconds(devices, estimators, None, 1e-5, db) == first
    assert db.read_text().count("\n") == len(cutting)  # served from the database
    probe = strategy.load_probe(len(devices))
    geometry = strategy.TileGeometry(probe, strategy.flexpie_layers(probe), len(devices))
    problem = strategy.problem_of(geometry, devices, estimators, None, {}, 1, 1e-5)
    home = SCHEMES.index("Home")
    for run, scheme in zip(runs, cutting, strict=True):  # measured in SCHEMES' order
        q = SCHEMES.index(scheme)
        tiled = [i for i in range(len(geometry)) if np.isfinite(problem.compute_s[i, 0, q])]
        cuts = [(i, i + 1, q if i in tiled else home) for i in range(len(geometry))]
        partition = evaluate(problem, cuts)
        median = float(np.median(run["samples_s"]))
        want = max(0.0, (median - partition.predicted_s) / len(tiled))
        assert len(tiled) == strategy.PROBE_LAYERS and first[scheme] == pytest.approx(want)
    rows = strategy.to_plan(geometry, devices, evaluate(problem, [
        (i, i + 1, SCHEMES.index("InH") if i < strategy.PROBE_LAYERS else home)
        for i in range(len(geometry))
    ]), "fixed-InH")  # fmt: skip
    profiler = Profiler(ProfileDB(db))  # other links: another record
    profiler.profile_run(probe, devices, rows, "ring of 2 at 50 Mbit/s", repeat=3)
    assert profiler.misses == 1 and db.read_text().count("\n") == len(cutting) + 1
    assert strategy.segment_seconds(devices[:1], estimators, None, 0.0, db) == {}
    model = load_zoo_model("resnet18:tiny")
    geometry = strategy.TileGeometry(model, strategy.flexpie_layers(model), len(devices))
    charges = {"InH": 0.25, "Grid": 0.5}
    plain, charged = (
        strategy.problem_of(geometry, devices, estimators, None, {}, segment_s=s).compute_s
        for s in ({}, charges)
    )  # fmt: skip
    finite = np.isfinite(plain)
    extra = np.where(finite, charged - np.where(finite, plain, 0.0), 0.0)
    for q, scheme in enumerate(SCHEMES):
        assert np.allclose(extra[..., q][finite[..., q]], charges.get(scheme, 0.0)), scheme
        assert finite[..., q].any()


def test_estimators_round_trip_and_refuse_bad_traces(trained, tmp_path):
    folder, estimators = trained
    again = Estimator.load(folder / "est", "sync")
    rows = read_traces(folder / "t.jsonl")["sync"][0]
    np.testing.assert_allclose(again.predict(rows), estimators.sync.predict(rows))
    # each size traced both ways between the two cores: one workload per size
    assert again.held_out_mape >= 0 and again.traces == len(SYNC_SIZES)
    with pytest.raises(ValueError, match="at least 5 traces"):
        train("sync", rows[:3], [1e-3] * 3)
    with pytest.raises(ValueError, match="unknown estimator 'power'"):
        train("power", rows, [1e-3] * len(rows))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"estimator": "sync", "seconds": 1.0}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: not a trace"):
        read_traces(bad)


def test_a_convolution_costs_the_columns_the_rule_computes(tmp_path):
    """The rule computes a 17-column row 24 wide (whole vectors of 8): traced at 8-32
    columns, each taking the time of the columns it computes, the estimator prices 17 columns
    as 24 (learning seconds per kept column it priced them as 17, 0.71 of that); a 1x1
    convolution (the matmul rule's) and a row of 4 (vectorized by channel) are not widened.
    An estimator saved by code that learned seconds per other work is refused."""
    widths, channels = (8, 16, 24, 32), (32, 48, 64, 96)
    rows = [conv_trace_row(c, w) for w in widths for c in channels]
    seconds = [1e-3 * c * c * (-(-w // 8) * 8) / 64**2 for w in widths for c in channels]
    est = train("compute", rows, seconds, rounds=20)
    wide, narrow = est.predict([conv_trace_row(64, 24), conv_trace_row(64, 17)])
    assert narrow == pytest.approx(wide, rel=0.05)
    same = train("compute", [conv_trace_row(c, w, 1) for w in widths for c in channels],
                 seconds, rounds=20)  # fmt: skip
    one, seventeen = same.predict([conv_trace_row(64, 24, 1), conv_trace_row(64, 17, 1)])
    assert seventeen == pytest.approx(one * 17 / 24, rel=0.05)
    (four,) = est.predict([conv_trace_row(64, 4)])  # by channel: 4 columns computed
    assert four == pytest.approx(wide * 4 / 24, rel=0.05)
    est.save(tmp_path)
    meta = tmp_path / "compute.meta.json"
    meta.write_text(meta.read_text().replace('"gflops x widened columns"', '"gflops"'))
    with pytest.raises(ValueError, match=r"learned seconds per 'gflops'.*train it again"):
        Estimator.load(tmp_path, "compute")


@pytest.mark.parametrize("mcpu", ["x86-64", "znver3", "znver5"])
def test_a_join_is_priced_by_the_copy_loop_the_injective_rule_builds(mcpu):
    """The rearrange estimator's vector and steps are those of the kernel the injective rule
    schedules for the join (a row of 28 on 8 lanes: vectors of 7), on 4, 8 and 16 lanes; a
    run of whole vectors is told from one whose vectors straddle two pieces."""
    target = Target({"kind": "llvm", "mcpu": mcpu})
    lanes = vector_lanes(target, 32)
    for shape, pieces, axis in JOINS[::5]:
        mod = relax.transform.LegalizeOps()(concat_module(shape, pieces, axis))
        (func,) = (f for gv, f in mod.functions.items() if gv.name_hint != "main")
        sch = Injective().schedule(func, target)
        (block,) = sch.get_child_blocks(sch.get_sblock("root"))
        loops = [sch.get(loop) for loop in sch.get_loops(block)]
        row = {"bytes": 4 * int(np.prod(shape)), "pieces": pieces,
               **concat_layout(shape, pieces, axis), "threads": 1, "cpu_quota": 1.0,
               "lanes": lanes}  # fmt: skip
        col = dict(zip(FEATURES["rearrange"], _matrix("rearrange", [row]).T, strict=True))
        _, vector, steps, whole = (float(c[0]) for c in _join_columns(col))
        vectorized = [int(x.extent) for x in loops if x.kind == tirx.ForKind.VECTORIZED] or [1]
        assert vector == vectorized[0], (shape, pieces, axis, mcpu)
        assert steps == np.prod([int(x.extent) for x in loops]) / vector
        widths = {hi - lo for lo, hi in even_parts(shape[axis], pieces)}
        if axis < 3:  # rows or channels cut: a run is whole rows
            assert whole == 1.0
        else:  # columns cut: a run is one piece's row, of whole vectors or not
            assert whole == float(all(w % vector == 0 for w in widths)), (shape, pieces, mcpu)


def test_a_workload_traced_again_is_one_workload_with_its_median_time():
    x = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [1.0, 2.0], [5.0, 6.0]])
    rows, seconds = merge_repeats(x, np.array([1.0, 7.0, 3.0, 2.0, 9.0]))
    np.testing.assert_array_equal(rows, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(seconds, [2.0, 7.0, 9.0])
    # a trace file given twice: the same workloads, not twice as many (none held out of
    # training while its twin is fitted)
    sizes = (4096, 32768, 131072, 524288, 2097152)
    link = {"bandwidth_mbps": 100.0, "latency_ms": 0.0, "hops": 1.0, "topology": 1.0}
    sync = [{"bytes": b, **link, "devices": 4.0, "idle_ms": 0.0} for b in sizes]
    times = [b / 12.5e6 + 1e-4 for b in sizes]
    assert train("sync", sync * 2, times * 2, rounds=5).traces == 5
    rows, seconds = distinct_workloads("sync", sync * 2, times * 2)
    assert rows.shape == (5, 7) and np.allclose(seconds, times)


def test_compute_rows_tell_operators_of_one_shape_apart():
    """A ReLU, a bias add and a residual add of one tile are three workloads (one row each
    when traced), told apart by the tensors they read."""
    x, y = (relax.Var(n, relax.TensorType((1, 8, 6, 6), "float32")) for n in "xy")
    bias = relax.Var("b", relax.TensorType((1, 8, 1, 1), "float32"))
    bb = relax.BlockBuilder()
    calls = [bb.normalize(c) for c in (relax.op.nn.relu(x), relax.op.add(x, bias),
                                       relax.op.add(x, y))]  # fmt: skip
    tile = ((0, 1), (0, 8), (0, 3), (0, 6))
    rows = [strategy.compute_row(c, tile, {}) for c in calls]
    assert [(r["operands"], r["elements_read"]) for r in rows] == [(1, 144), (2, 152), (2, 288)]
    assert len({tuple(r.values()) for r in rows}) == 3


def test_a_sample_of_tiles_keeps_a_share_for_narrow_convolutions():
    """Convolutions with rows of 1-5 columns (the rule vectorizes them by channel) are a few
    percent of all tiles: a sample keeps a quarter of its places for them, and the estimator
    is told which rows they are."""
    model = load_zoo_model("resnet18:tiny")
    every = trace_collection.compute_workloads([model], 4, 10**6)
    narrow = [r for _, _, r in every if trace_collection.is_narrow_conv(r)]
    sample = trace_collection.compute_workloads([model], 4, 40)
    kept = [r for _, _, r in sample if trace_collection.is_narrow_conv(r)]
    assert len(narrow) < len(every) / 4  # rare: a uniform draw of 40 would expect under 10
    assert len(sample) == 40 and len(kept) >= 10
    rows = [{**r, "threads": 1, "cpu_quota": 1.0, "lanes": 8} for r in narrow + kept]
    assert channel_vectorized(rows).any()


def test_a_transformer_is_priced_and_planned(devices, trained):
    """A 4-D output of a 3-D operand (a transformer's heads split from its features) is a
    row like any other (it raised ``IndexError`` and stopped BERT's plan); bert-small:tiny
    plans with its token rows cut (``InH``) somewhere."""
    x = relax.Var("x", relax.TensorType((1, 6, 8), "float32"))
    heads = relax.BlockBuilder().normalize(relax.op.reshape(x, (1, 6, 2, 4)))
    row = strategy.compute_row(heads, ((0, 1), (0, 3), (0, 2), (0, 4)), {})
    assert (row["in_c"], row["in_h"], row["out_c"], row["out_h"]) == (8, 3, 4, 6)
    estimators = trained[1]
    model = load_zoo_model("bert-small:tiny")
    geometry = strategy.TileGeometry(model, strategy.flexpie_layers(model), len(devices))
    problem = strategy.problem_of(geometry, devices, estimators, None, {})
    assert np.isfinite(problem.compute_s[:, 0, SCHEMES.index("InH")]).any()


def _conv_then_its_shape():
    """Two convolutions, the second plus an element of the first's shape: a layer ends in
    ``R.shape_of`` and the next reads the shape (ONNX imports of timm's DeiT and torchvision's
    ConvNeXt)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8, 8), "float32"))
    w = relax.const(np.full((4, 4, 3, 3), 1 / 36, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, w, padding=1)))
            size = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(y))))
            c = relax.op.astype(relax.op.take(size, relax.const(1, "int64"), axis=0), "float32")
            out = bb.emit_output(relax.op.nn.conv2d(y, w, padding=1) + c)
        bb.emit_func_output(out)
    return bb.get()


def test_a_shape_read_across_layers_is_planned_and_equals_the_whole_model(devices, trained):
    """A shape value read from an earlier layer moves no bytes (pricing it raised
    ``AttributeError``: a shape has no dtype, and stopped DeiT's and ConvNeXt's plans)."""
    folder, estimators = trained
    model = load_model(_conv_then_its_shape())
    geometry = strategy.TileGeometry(model, strategy.flexpie_layers(model), len(devices))
    reader = geometry.tiles(len(geometry) - 1, 1, "Home")[0]  # the shape's reader, whole
    assert list(reader.reads) == [geometry.outputs[-2]]  # the convolution before it, no shape
    plan = strategy.plan_with_estimators(model, devices, None, estimators, folder / "db.jsonl").plan
    x = model.random_inputs()
    np.testing.assert_allclose(api.run(api.compile(model, devices, plan), x)[0],
                               api.reference_outputs(model, x, devices[0])[0], rtol=1e-6)  # fmt: skip


def test_joins_traced_say_how_they_walk_memory():
    """Equal bytes join at different speeds by the runs they copy and the axis they cut."""
    layout = {axis: concat_layout((1, 512, 7, 7), 4, axis) for axis in (1, 2, 3)}
    assert layout[1] == {"runs": 4, "inner": 7, "axis": 2, "span": 49}  # a block per piece
    assert layout[2] == {"runs": 4 * 512, "inner": 7, "axis": 1, "span": 7}  # per channel
    assert layout[3] == {"runs": 4 * 512 * 7, "inner": 7, "axis": 0, "span": 1}  # per row
    assert {axis for _, _, axis in JOINS} == {1, 2, 3}


def test_transfers_are_timed_on_a_busy_link_then_after_idle_gaps(monkeypatch):
    """A shaped link lets an idle burst through at once: the pulls that spend it are untimed
    (``drain``), then each timed pull waits the idle gap traced (none for payloads too large
    for a burst to matter)."""
    asked = []

    class Session:
        def get_function(self, name):
            if name.endswith("fill"):
                return lambda value, nbytes: 7
            return lambda host, port, src, repeat, drain, idle_s: (
                asked.append((drain, idle_s)) or json.dumps([4e-3, 5e-3, 6e-3][:repeat])
            )

    monkeypatch.setattr(remote_worker, "connect_worker", lambda spec: (Session(), ("h", 1)))
    a, b = (dataclasses.replace(resolve_device("cpu"), name=n, host=f"127.0.0.1:{9000 + k}")
            for k, n in enumerate("ab"))  # fmt: skip
    cluster = ClusterSpec.uniform([a, b], "ring", 50.0)
    sizes = (1024, 2**20, 2**23)
    timed = trace_collection._pulled(cluster, a, b, sizes, repeat=3, idle_ms=(0.0, 2.0))
    assert timed == [(1024, 0.0, 5e-3), (1024, 2.0, 5e-3), (2**20, 0.0, 5e-3), (2**23, 0.0, 5e-3)]
    assert asked == [(trace_collection.MAX_DRAIN_PULLS, 0.0), (trace_collection.MAX_DRAIN_PULLS,
                     2e-3), (1, 0.0), (0, 0.0)]  # fmt: skip
    assert trace_collection.drain_pulls(4096) == trace_collection.DRAIN_BYTES // 4096 - 1


def test_transfers_between_remote_workers_are_traced_both_ways(start_workers, monkeypatch):
    monkeypatch.setattr(trace_collection, "DRAIN_BYTES", 8192)
    a, b = remote_cpus(start_workers(2))
    cluster = ClusterSpec.uniform([a, b], "ring", 1000.0)
    traces = trace_collection.sync_traces(
        [a, b], cluster, sizes=(1024, 2**20), repeat=2, idle_ms=(0.0, 30.0)
    )
    assert [(t["source"], t["features"]["bytes"], t["features"]["idle_ms"]) for t in traces] == [
        ("edge-0->edge-1", 1024, 0.0), ("edge-0->edge-1", 1024, 16.0),  # the longest priced
        ("edge-0->edge-1", 2**20, 0.0),
        ("edge-1->edge-0", 1024, 0.0), ("edge-1->edge-0", 1024, 16.0),
        ("edge-1->edge-0", 2**20, 0.0),
    ]  # fmt: skip
    # the idle gap before a pull is not its time
    assert all(t["features"]["hops"] == 1 and 0 < t["seconds"] < 0.03 for t in traces)


def test_pieces_over_one_link_share_its_refilled_burst():
    """A boundary priced after links idle 3 ms: a piece whose links already carried bytes of
    the boundary costs what it adds to them (with a 250-byte burst, 300 bytes then 400 more
    over ``a -> b`` cost the time of 700 at once, not 300's and 400's each with the burst)."""
    a, b, c = (dataclasses.replace(resolve_device("cpu"), name=n, host=f"127.0.0.1:{9000 + k}")
               for k, n in enumerate("abc"))  # fmt: skip
    ring = ClusterSpec.uniform([a, b, c], "ring", 50.0)
    rows: dict = {}

    class Pricer:  # dedups rows as _Pricer does
        def ask(self, row):
            return rows.setdefault((row["bytes"], row["idle_ms"]), len(rows))

    t = strategy.Transfer
    boundary = [
        ([t(1, 0, 100, (("b", "a"),)), t(2, 0, 200, (("c", "a"),))], [0]),
        ([t(0, 1, 300, (("a", "b"),)), t(2, 1, 400, (("c", "a"), ("a", "b")))], []),
    ]
    pieces = strategy.priced(boundary, strategy.Paths([a, b, c], ring), Pricer(), 3e-3)
    assert list(rows) == [(100, 3.0), (200, 3.0), (300, 3.0), (700, 3.0)]
    assert [[(p.sync, p.before) for p in got] for got, _ in pieces] == [
        [(0, -1), (1, -1)], [(2, -1), (3, 2)]  # after a -> b's 300 bytes (c -> a's 200 fewer)
    ]  # fmt: skip
    sync_s = np.array([max(0.0, n - 250) / 100 for n, _ in rows])  # a burst of 250 bytes
    assert [p.seconds(sync_s) for p in pieces[1][0]] == [0.5, 4.0]
    # the link a -> b carries 700 bytes at once: 4.5, more than any receiver's join
    assert strategy.boundary_seconds(pieces, sync_s, np.array([1.0]), 0.0) == 4.5


def test_links_idle_through_segments_that_moved_nothing():
    """The idle time before a boundary: the segment before and, back through boundaries that
    moved nothing (a 1x1 convolution's rows), the layers before it."""
    inf = np.inf
    compute = np.array([[[1.0], [3.5]], [[2.0], [inf]], [[4.0], [inf]]])  # (3 layers, 2, 1)
    quiet, busy = [([], [])], [([strategy.Transfer(1, 0, 8)], [])]
    boundaries = {(1, 0, 0, 1): quiet, (2, 0, 0, 1): busy, (2, 0, 0, 2): busy}
    idle = strategy.idle_seconds(compute, boundaries)
    assert idle[1, 0, 1] == 1.0
    assert idle[2, 0, 1] == 2.0 + 1.0  # layer 1, entered silently after layer 0
    assert idle[2, 0, 2] == 3.5  # layers 0-1 fused, entered from the input
    assert idle[3, 0, 1] == 4.0  # layer 2, entered with bytes
    assert idle[3, 0, 2] == inf  # layers 1-2 cannot be one segment


def test_topology_of_a_cluster_from_its_links():
    names = ["a", "b", "c", "d"]
    assert topology(names, [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]) == "ring"
    assert topology(names, [("a", "b"), ("a", "c"), ("a", "d")]) == "ps"
    assert topology(names, [(x, y) for x in names for y in names if x < y]) == "mesh"
    assert topology(names, []) == "local"
    assert topology(names, [("a", "b"), ("c", "d")]) == "other"


def test_tiles_run_on_remote_workers_and_exchange_worker_to_worker(start_workers):
    """Three workers over TVM RPC: every segment's tiles on all three, boundary parts pushed
    worker to worker, the result gathered once; the same numbers as one device."""
    from tvm_hetero.plan.spatial_plan import SpatialPlan
    from tvm_hetero.runtime.executor import Executor

    edges = remote_cpus(start_workers(3))
    model = load_zoo_model("resnet18:tiny")
    layers = strategy.flexpie_layers(model)
    geometry = strategy.TileGeometry(model, layers, 3)
    cycle = ("InH", "Grid", "OutC", "InW")
    schemes = [
        cycle[k % 4] if geometry.tiles(k, 1, cycle[k % 4]) is not None else "Home"
        for k in range(len(layers))
    ]
    assert schemes.count("Home") < len(layers) - 2
    plan = SpatialPlan(tuple(e.name for e in edges), tuple(map(tuple, layers)), tuple(schemes))
    compiled = api.compile(model, edges, plan)
    assert {u.device for u in compiled.deployment.units} == {0, 1, 2}
    x = model.random_inputs()
    want = api.run(api.compile(model, [resolve_device("cpu")]), x)
    with Executor(compiled.deployment, timeout_s=30) as ex:
        got = ex.run(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_a_boundary_costs_its_busiest_receiver_sender_or_link():
    sync_s, joins_s = np.array([3.0, 1.0, 2.0]), np.array([0.5])
    piece = strategy.Piece
    scatter = [([piece(0, 0)], []), ([piece(0, 0)], []), ([piece(0, 2)], [])]  # home serves 3
    assert strategy.boundary_seconds(scatter, sync_s, joins_s, 0.0) == 8.0
    halo = [([piece(1, 1), piece(2, 1)], [0]), ([piece(0, 1)], []), ([piece(0, 1)], [])]
    assert strategy.boundary_seconds(halo, sync_s, joins_s, 0.25) == 2.0 + 0.5 + 0.5
    assert strategy.boundary_seconds([([], [])], sync_s, joins_s, 1.0) == 0.0
    # a ring a-b-c: a -> c passes b, so the link b -> c carries it and b's own piece to c
    relay = [([piece(0, 0, (("a", "b"), ("b", "c"))), piece(1, 1, (("b", "c"),))], [])]
    assert strategy.boundary_seconds(relay, sync_s, joins_s, 0.0) == 4.0
    apart = [([piece(0, 0, (("a", "b"), ("b", "c")))], []), ([piece(1, 2, (("b", "a"),))], [])]
    assert strategy.boundary_seconds(apart, sync_s, joins_s, 0.0) == 3.0  # links both ways


def test_pieces_are_routed_along_the_clusters_links():
    edges = [dataclasses.replace(resolve_device("cpu"), name=n, host=f"127.0.0.1:{9000 + k}")
             for k, n in enumerate("abcd")]  # fmt: skip
    ring = ClusterSpec.uniform(edges, "ring", 100.0)
    paths = strategy.Paths(edges, ring)
    assert paths.route(0, 2) == (("a", "b"), ("b", "c"))
    assert paths.route(3, 0) == (("d", "a"),)
    assert strategy.Paths(edges, None).route(0, 1) == ()


def test_the_shipped_estimators_load_by_default():
    from tvm_hetero.strategies.flexpie.planner import DEFAULT_MODELS, Estimators

    assert (DEFAULT_MODELS / "compute.meta.json").exists()
    assert Estimators.load() is not None


def test_a_confirmation_too_large_to_hold_times_saved_builds_apart(devices, trained, monkeypatch):
    """Builds that would not fit are saved and timed in processes of their own; the kept one is
    not handed over (the caller compiles it again) and the saved files are removed."""
    from tvm_hetero.build import held
    from tvm_hetero.strategies.flexpie.confirm import ConfirmBuilds

    folder, estimators = trained
    model = load_zoo_model("resnet18:tiny")
    result = strategy.plan_with_estimators(model, devices, None, estimators, folder / "db.jsonl")
    monkeypatch.setattr(held, "builds_fit", lambda model, count: False)
    apart = []

    def spy(path, runs, warmup, microbatches=1):
        apart.append(path)
        return [float(len(apart))] * runs

    monkeypatch.setattr("tvm_hetero.runtime.executor.time_saved", spy)
    builds = ConfirmBuilds(model, devices, None, 3)
    kept = confirm_by_measurement(result, model, devices, plans=2, repeat=3, build=builds)
    timed = confirm_candidates(result.partitions(), 2)
    assert len({str(p) for p in apart}) == len(timed) and list(kept.confirmed_s) == timed
    assert kept.kept == timed[0]  # timed first each round, so the fastest here
    assert builds.take(kept.plan) is None and not builds.held.folder.exists()


class _Scaled:
    """An estimator whose every price is ``factor`` times ``estimator``'s."""

    def __init__(self, estimator: Estimator, factor: float) -> None:
        self.estimator, self.factor = estimator, factor

    def predict(self, rows) -> np.ndarray:
        return self.estimator.predict(rows) * self.factor


def test_tiles_are_priced_by_how_much_longer_the_home_device_ran_than_its_price(
    devices, trained, monkeypatch
):
    """The home device runs the whole model alone once (kept in the database); the compute
    estimator's prices are scaled so that the home device alone is priced what it ran, and an
    estimator that prices half as much gets twice the scale."""
    folder, estimators = trained
    model = load_zoo_model("resnet18:tiny")
    geometry = strategy.TileGeometry(model, strategy.flexpie_layers(model), len(devices))
    db = folder / "scale.jsonl"
    strategy.compute_scale(model, geometry, devices, estimators, {}, db)  # runs the home device
    (run,) = [json.loads(line) for line in db.read_text().splitlines()]
    assert run["workload"] == {"op": "run", "model": model.name, "devices": ["cpu@0"]}
    median = float(np.median(run["samples_s"]))
    home = SCHEMES.index("Home")

    def alone_s(estimators, scale: float) -> float:
        problem = strategy.problem_of(geometry, devices, estimators, None, {}, compute_scale=scale)
        return evaluate(problem, [(i, i + 1, home) for i in range(len(geometry))]).predicted_s

    # an estimator the host's run scales by about one, whatever this host's speed (the shipped
    # one, fitted elsewhere, can be off by more than the limits: 4.0, clamped, on a loaded run)
    priced = alone_s(estimators, 2.0) - alone_s(estimators, 1.0)
    fitted = dataclasses.replace(
        estimators, compute=_Scaled(estimators.compute, (median - alone_s(estimators, 0.0)) / priced)
    )  # fmt: skip
    scale = strategy.compute_scale(model, geometry, devices, fitted, {}, db)
    low, high = strategy.SCALE_LIMITS
    assert low < scale < high and scale == pytest.approx(1.0, rel=1e-6), scale
    assert alone_s(fitted, scale) == pytest.approx(median, rel=1e-6)
    cheap = dataclasses.replace(fitted, compute=_Scaled(fitted.compute, 0.5))
    again = strategy.compute_scale(model, geometry, devices, cheap, {}, db)
    assert again == pytest.approx(2 * scale)
    assert db.read_text().count("\n") == 1  # the run served from the database
    elsewhere = folder / "searched.jsonl"  # a search's run of the home device alone: no other
    assert strategy.compute_scale(
        model, geometry, devices, fitted, {}, elsewhere, home_s=median
    ) == pytest.approx(scale)
    assert not elsewhere.exists()
    assert strategy.compute_scale(model, geometry, devices[:1], estimators, {}, db) == 1.0

    def fails(*_args, **_kwargs):
        raise RunError("worker cpu@0 lost")

    monkeypatch.setattr(Profiler, "profile_run", fails)
    assert strategy.compute_scale(model, geometry, devices, estimators, {}, folder / "x") == 1.0


def test_a_search_s_run_of_the_home_device_alone_calibrates_the_tiles(devices, trained, tmp_path):
    """Inside a search the home device alone has run already: FlexPie takes that run (here
    half a second, far beyond what the tiny model takes: the largest scale) and runs the
    model on it no second time."""
    from argparse import Namespace

    from tvm_hetero.strategies.base import Progress, SearchCosts
    from tvm_hetero.strategies.flexpie.report import plan_result

    _, estimators = trained

    class Searched(Progress):
        def costs(self) -> SearchCosts:
            return SearchCosts(1.0, {}, {devices[0].name: 0.5})

    db = tmp_path / "db.jsonl"
    settings = Namespace(estimators=estimators, cluster=None, db=db, options=None, max_run=6,
                         confirm=False, confirm_plans=1)  # fmt: skip
    found = plan_result(load_zoo_model("resnet18:tiny"), devices, settings, Searched())
    assert found.detail.compute_scale == strategy.SCALE_LIMITS[1]
    runs = [json.loads(line)["workload"] for line in db.read_text().splitlines()]
    assert not [w for w in runs if w.get("op") == "run" and w["devices"] == [devices[0].name]]
