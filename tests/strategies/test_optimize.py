"""``optimize``: every strategy asked, the fastest measured kept, never slower than one device
alone, its build equal to the single-device build; a plug-in strategy from the test tree
offered by ``plan``, ``compile --strategy`` and ``optimize``."""

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import mlp_onnx

from tvm_hetero import api
from tvm_hetero.cli.main import main
from tvm_hetero.devices import resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.optimize import search
from tvm_hetero.optimize.report import took
from tvm_hetero.optimize.search import PLANNING_SHARE, optimize
from tvm_hetero.runtime.deployment import read_manifest
from tvm_hetero.strategies import registry


@pytest.fixture
def toy(monkeypatch):
    """The toy strategy of ``toy_strategy`` registered for one test."""
    monkeypatch.setitem(registry.PACKAGES, "toy", "toy_strategy")
    return registry.get_strategy("toy")


@pytest.fixture
def no_floor(monkeypatch):
    """Planning in its share from the search's start, with no device compiled and run first:
    for the tests of the shares, whose budgets are shorter than a compile."""
    monkeypatch.setattr(search._Search, "floor", lambda *args: None)


@pytest.fixture(scope="module")
def cores():
    return [resolve_device("cpu@0"), resolve_device("cpu@1")]


def test_keeps_the_fastest_measured_never_slower_than_one_device(tmp_path, cores):
    model = load_model("mlp:tiny")
    found = optimize(model, cores, settings={"db": str(tmp_path / "db.jsonl")}, runs=10)
    timed = [e for e in found.entries if e.samples_s]
    assert found.kept.status == "kept"
    assert found.kept.p50_s == min(e.p50_s for e in timed if e.kind != "peer")
    assert found.kept.p50_s <= found.best("single").p50_s
    names = {e.name: e for e in found.entries}
    assert {"cpu@0 alone", "cpu@1 alone", "cpu@0-1 alone"} <= set(names)
    assert names["edgepipe"].status == "not applicable: plans for throughput, not latency"
    assert names["flexpie"].status.startswith("not applicable: no spatial layers")
    assert names["duet"].status.startswith("not applicable: no branches")
    assert names["eop"].samples_s
    # two alike cores: one operator at a time, no plan over them beats one of them
    assert names["als"].status.startswith("not applicable: its devices compute alike")
    assert list(found.phases) == ["each device alone", "planning", "compiling", "timing"]
    assert 0 < sum(found.phases.values()) <= found.seconds
    inputs = model.random_inputs()
    reference = api.reference_outputs(model, inputs, cores[0])
    got = api.run(found.compiled, inputs)
    np.testing.assert_allclose(got[0], reference[0], rtol=1e-5, atol=1e-5)


def test_builds_too_large_to_hold_are_saved_and_timed_apart(tmp_path, cores, monkeypatch):
    """With ``in_memory=False`` (what a model whose candidates' builds would not fit in memory
    gets) each build is saved and dropped, timed in a process of its own each round, and the
    kept one compiled again: the same outputs as one device."""
    monkeypatch.setattr(registry, "PACKAGES", {"eop": registry.PACKAGES["eop"]})
    timed_apart = []

    def spy(path, runs, warmup, microbatches=1):
        timed_apart.append(Path(path).name)
        return [10.0 - len(timed_apart)] * runs  # the later, the faster: EOP's plan is kept

    monkeypatch.setattr("tvm_hetero.runtime.executor.time_saved", spy)
    model = load_model("mlp:tiny")
    found = optimize(model, cores, settings={"db": str(tmp_path / "db.jsonl")}, runs=4,
                     rounds=2, in_memory=False)  # fmt: skip
    timed = [e for e in found.entries if e.samples_s]
    # each device alone run once apart before planning, then four candidates in two rounds
    assert len(timed) == 4 and len(set(timed_apart)) == 4 and len(timed_apart) == 3 + 8
    assert set(timed_apart[:3]) == set(timed_apart[3:6]) and "3.tar" not in timed_apart[:3]
    assert found.kept.name == "eop" and len(found.kept.devices) == 2
    assert isinstance(found.compiled, api.CompiledModel)
    assert found.compiled.placement == found.kept.plan
    assert list(found.phases)[-1] == "compiling the kept one again"
    inputs = model.random_inputs()
    reference = api.reference_outputs(model, inputs, cores[0])
    np.testing.assert_allclose(api.run(found.compiled, inputs)[0], reference[0], rtol=1e-5,
                               atol=1e-5)  # fmt: skip


def test_a_device_alone_that_compiles_the_same_code_reuses_the_build(tmp_path, cores,
                                                                    monkeypatch):  # fmt: skip
    """``cpu@0`` and ``cpu@1`` (one core each, one target) compile the same code: the second
    runs the first's build on its own core; ``cpu@0-1`` (two threads) is compiled."""
    from tvm_hetero.optimize import search

    monkeypatch.setattr(registry, "PACKAGES", {})  # each device alone
    compiled, compile_model = [], search.compile_model

    def counted(model, devices, *args):
        compiled.append([d.name for d in devices])
        return compile_model(model, devices, *args)

    monkeypatch.setattr(search, "compile_model", counted)
    model = load_model("mlp:tiny")
    found = optimize(model, cores, settings={"db": str(tmp_path / "db.jsonl")}, runs=4)
    assert compiled == [["cpu@0"], ["cpu@0-1"]]
    assert all(len(e.samples_s) == 4 for e in found.entries)
    assert found.compiled.deployment.devices[0].name == found.kept.devices[0]


def test_a_saved_device_alone_serves_its_twin_without_a_compile(tmp_path, cores, monkeypatch):
    """Builds saved (too large to hold): ``cpu@1`` alone is still not compiled, its build a
    copy of ``cpu@0``'s file naming ``cpu@1``, and each is timed apart on its own device."""
    from tvm_hetero.optimize import search
    from tvm_hetero.runtime.deployment import read_manifest

    monkeypatch.setattr(registry, "PACKAGES", {})  # each device alone
    compiled, compile_model, timed_on = [], search.compile_model, {}

    def counted(model, devices, *args):
        compiled.append([d.name for d in devices])
        return compile_model(model, devices, *args)

    def spy(path, runs, warmup, microbatches=1):
        device = read_manifest(path)["devices"][0]["name"]
        timed_on[device] = timed_on.get(device, 0) + runs
        return [1.0] * runs

    monkeypatch.setattr(search, "compile_model", counted)
    monkeypatch.setattr("tvm_hetero.runtime.executor.time_saved", spy)
    found = optimize(load_model("mlp:tiny"), cores, settings={"db": str(tmp_path / "db.jsonl")},
                     runs=2, rounds=1, in_memory=False)  # fmt: skip
    assert compiled[:2] == [["cpu@0"], ["cpu@0-1"]]  # (then the kept one, again)
    assert timed_on == {"cpu@0": 1 + 2, "cpu@1": 1 + 2, "cpu@0-1": 1 + 2}  # once, then timed
    assert all(len(e.samples_s) == 2 for e in found.entries)


def test_throughput_objective_times_edgepipe_and_latency_plans_as_a_stream(
    tmp_path, cores, monkeypatch
):  # fmt: skip
    """Under the throughput objective EdgePipe plans, and a plan for one request (EOP's)
    takes part too, timed with requests in flight like every other candidate."""
    monkeypatch.setattr(
        registry, "PACKAGES", {k: registry.PACKAGES[k] for k in ("eop", "edgepipe")}
    )
    model = load_model("mlp:tiny")
    found = optimize(model, cores, "throughput", settings={"db": str(tmp_path / "db.jsonl")},
                     runs=5, microbatches=4)  # fmt: skip
    names = {e.name: e for e in found.entries}
    assert names["eop"].plan is not None and not names["eop"].status.startswith("not appl")
    assert names["edgepipe"].plan is not None  # planned (one stage on one core is a single)
    assert found.kept.samples_s


def test_a_strategy_that_fails_drops_out_and_over_budget_ones_are_not_planned(
    tmp_path, cores, toy, monkeypatch
):  # fmt: skip
    def broken(*args, **kwargs):
        raise ValueError("cannot handle this kernel")

    monkeypatch.setattr(type(toy), "plan", broken)
    monkeypatch.setattr(registry, "PACKAGES", {"toy": "toy_strategy"})
    model = load_model("mlp:tiny")
    found = optimize(model, cores, settings={"db": str(tmp_path / "db.jsonl")}, runs=5)
    assert {e.name: e for e in found.entries}["toy"].status == "failed: cannot handle this kernel"

    def buggy(*args, **kwargs):
        raise KeyError("lv3")

    monkeypatch.setattr(type(toy), "plan", buggy)
    found = optimize(model, cores, settings={"db": str(tmp_path / "db.jsonl")}, runs=3)
    assert found.entries[0].status == "failed (a bug): KeyError: 'lv3'"
    monkeypatch.undo()
    late = optimize(model, cores, budget_s=0.0, settings={"db": str(tmp_path / "db.jsonl")},
                    runs=5)  # fmt: skip
    planned = [e for e in late.entries if e.kind == "strategy" and e.plan is not None]
    assert not planned
    assert late.kept.kind == "single"


def test_onnx_runtime_is_timed_beside_in_the_same_rounds(tmp_path, cores, monkeypatch):
    monkeypatch.setattr(registry, "PACKAGES", {})  # each device alone and ONNX Runtime
    path = mlp_onnx(tmp_path / "mlp.onnx")
    model = load_model(str(path))
    found = optimize(model, cores, settings={"db": str(tmp_path / "db.jsonl")}, runs=10,
                     onnx=str(path))  # fmt: skip
    peers = [e for e in found.entries if e.kind == "peer"]
    assert {e.name for e in peers} == {"ORT on cpu@0", "ORT on cpu@1", "ORT on cpu@0-1"}
    assert all(len(e.samples_s) == 10 for e in peers)


def test_onnx_runtime_sessions_stop_spinning_when_a_run_ends():
    """Left spinning, ONNX Runtime's threads slowed the next round of ours on the same cores."""
    from tvm_hetero.runtime.onnx_session import session_options

    opts = session_options(2)
    assert opts.get_session_config_entry("session.force_spinning_stop") == "1"
    assert (opts.intra_op_num_threads, opts.inter_op_num_threads) == (2, 1)


def test_plug_in_offered_by_plan_compile_and_optimize(tmp_path, capsys, toy):
    db = str(tmp_path / "db.jsonl")
    plan = tmp_path / "toy.json"
    assert main(["plan", "mlp:tiny", "--strategy", "toy", "--toy-predicted-ms", "0.5",
                 "-o", str(plan), "--db", db]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "toy: every operator on cpu@1" in out and plan.exists()
    tar = tmp_path / "toy.tar"
    assert main(["compile", "mlp:tiny", "--strategy", "toy", "-o", str(tar), "--check",
                 "--db", db]) == 0  # fmt: skip
    assert read_manifest(tar)["plan"]["strategy"] == "toy"
    best, report = tmp_path / "best.tar", tmp_path / "report.md"
    assert main(["optimize", "mlp:tiny", "--device", "cpu@0", "--device", "cpu@1",
                 "--runs", "5", "-o", str(best), "--report", str(report), "--db", db,
                 "--plot", str(tmp_path / "c.png")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "│ toy " in out and "kept" in out and "The search took" in out
    assert best.exists() and "| toy |" in report.read_text()
    assert "(each device alone " in report.read_text() and ", planning " in report.read_text()
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "Warning" not in out


def test_a_strategy_planning_past_the_budget_is_stopped(
    tmp_path, cores, toy, monkeypatch, no_floor
):
    import time

    def slow(self, model, devices, settings, progress):
        time.sleep(0.5)
        progress.step("swept", 2, 2)  # a phase done: let through, its work is kept
        progress.step("sweeping", 1, 2)
        raise AssertionError("not stopped at its report past the deadline")

    monkeypatch.setattr(registry, "PACKAGES", {"toy": "toy_strategy"})
    monkeypatch.setattr(type(toy), "plan", slow)
    found = optimize(load_model("mlp:tiny"), cores, budget_s=0.4, runs=3,
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    assert PLANNING_SHARE == 0.5  # of 0.4 s
    assert found.entries[0].status == "stopped: over its 0.2 s of the budget while sweeping"
    assert found.kept.kind == "single"


def test_a_strategy_that_reads_its_time_left_winds_down_by_itself(
    tmp_path, cores, toy, monkeypatch, no_floor
):  # fmt: skip
    """Reading the time left, a strategy's reports past its share are let through (its plan
    is kept) until it is a whole share late; then it is stopped as any other."""
    import time

    late_by = {"toy": 0.25}
    plan = type(toy).plan

    def winding(self, model, devices, settings, progress):
        while progress.time_left() > -late_by["toy"]:
            time.sleep(0.02)
        progress.step("last run", 1, 2)
        return plan(self, model, devices, settings, progress)

    monkeypatch.setattr(registry, "PACKAGES", {"toy": "toy_strategy"})
    monkeypatch.setattr(type(toy), "plan", winding)
    kept = optimize(load_model("mlp:tiny"), cores, budget_s=1.0, runs=3,
                    settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    assert kept.entries[0].plan is not None and not kept.entries[0].status.startswith("stopped")
    late_by["toy"] = 0.75
    stopped = optimize(load_model("mlp:tiny"), cores, budget_s=1.0, runs=3,
                       settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    assert stopped.entries[0].status == "stopped: over its 0.5 s of the budget while last run"


def _rows_split_at_run_time(path: Path) -> None:
    """``x`` (6 x 4) split along its rows by ``sizes`` given at run time, the pieces scaled
    and concatenated again: a model whose shapes it computes itself."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["p0", "p1"], axis=0),
        helper.make_node("Relu", ["p0"], ["r0"]),
        helper.make_node("Neg", ["p1"], ["r1"]),
        helper.make_node("Concat", ["r0", "r1"], ["y"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "routed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4]),
                          helper.make_tensor_value_info("sizes", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.save(model, path)


def test_no_strategy_plans_a_model_that_computes_its_shapes_at_run_time(tmp_path, cores):
    """Every plan is cut into units, which need every shape known from the inputs: each
    strategy says so before measuring, and the search keeps a device alone."""
    path = tmp_path / "routed.onnx"
    _rows_split_at_run_time(path)
    model = load_model(path)
    reason = "the model computes shapes at run time ("
    for name, strategy in registry.strategies().items():
        assert (strategy.applicable(model, cores, None) or "").startswith(reason), name
        assert reason not in (strategy.applicable(load_model("mlp:tiny"), cores, None) or "")
    found = optimize(model, cores, budget_s=60, runs=3,
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    strategies = [e for e in found.entries if e.kind == "strategy"]
    said = {e.name: e.status for e in strategies}
    assert said.pop("edgepipe") == "not applicable: plans for throughput, not latency"
    assert said and all(status.startswith(f"not applicable: {reason}") for status in said.values())
    assert found.kept.kind == "single"


def test_a_strategy_that_cannot_measure_in_its_share_stops_before_it_begins(
    tmp_path, cores, toy, monkeypatch, no_floor
):  # fmt: skip
    """A strategy whose first measuring would end past its share (:func:`check_time`) stops
    at once, the search says why and goes on: the others plan, each device alone is kept."""
    import time

    from tvm_hetero.strategies.base import check_time

    began = []

    def short(self, model, devices, settings, progress):
        began.append(time.monotonic())
        check_time(progress.time_left, 1e6, "its profiling runs")
        raise AssertionError("not stopped before measuring")

    monkeypatch.setattr(registry, "PACKAGES", {"toy_slow": "toy_slow", "toy": "toy_strategy"})
    monkeypatch.setattr(type(registry.get_strategy("toy_slow")), "plan", short)
    found = optimize(load_model("mlp:tiny"), cores, budget_s=60, runs=3,
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    status = {e.name: e.status for e in found.entries}
    assert re.fullmatch(
        r"stopped: its profiling runs would take 1000000 s or more here, and \d+ s of its "
        r"share are left",
        status["toy_slow"],
    ), status
    assert began and {e.name: e for e in found.entries}["toy"].plan is not None


def test_the_budget_ends_compiling_and_timing_too(tmp_path, cores, toy, monkeypatch, no_floor):
    """A plan made after the budget's end is not compiled; each device alone is, and timed in
    one round, not all five: the search ends near its budget, and says what it cut."""
    import time

    plan = type(toy).plan

    def late(self, model, devices, settings, progress):
        time.sleep(0.5)  # past the whole budget, with no report to be stopped at
        return plan(self, model, devices, settings, progress)

    monkeypatch.setattr(registry, "PACKAGES", {"toy": "toy_strategy"})
    monkeypatch.setattr(type(toy), "plan", late)
    found = optimize(load_model("mlp:tiny"), cores, budget_s=0.4, runs=10, rounds=5,
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    entries = {e.name: e for e in found.entries}
    assert entries["toy"].plan is not None
    assert entries["toy"].status == "not timed: the budget ended first"
    singles = [e for e in found.entries if e.kind == "single"]
    assert singles and all(len(e.samples_s) == 2 for e in singles)  # the first round's
    assert found.cut == "timed 2 of 10 runs each"
    assert "the budget's end: timed 2 of 10 runs each" in took(found)
    assert found.budget_s == pytest.approx(0.4) and found.seconds > 0.5
    assert re.search(r"; [\d.]+ s over its 0\.4 s budget\)$", took(found)), took(found)
    roomy = optimize(load_model("mlp:tiny"), cores, budget_s=600, runs=10, rounds=5,
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    assert roomy.cut == "" and all(len(e.samples_s) == 10 for e in roomy.entries if e.samples_s)
    assert "budget" not in {e.name: e for e in roomy.entries}["toy"].status
    assert "over its" not in took(roomy)


def test_each_strategy_plans_within_its_share_of_the_budget(
    tmp_path, cores, toy, monkeypatch, no_floor
):
    """A strategy that would plan forever is stopped at its share (half the budget with two),
    and the one after it still plans: it is not starved."""
    monkeypatch.setattr(registry, "PACKAGES", {"toy_slow": "toy_slow", "toy": "toy_strategy"})
    found = optimize(load_model("mlp:tiny"), cores, budget_s=2.0, runs=3,
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    status = {e.name: e.status for e in found.entries}
    assert status["toy_slow"].startswith("stopped: over its 0.5 s of the budget while step")
    assert {e.name: e for e in found.entries}["toy"].plan is not None


def test_each_device_alone_is_compiled_and_run_once_before_planning_which_leaves_time_to_time(
    tmp_path, cores, toy, monkeypatch
):  # fmt: skip
    """Each device alone is compiled and run once first; planning then ends where compiling
    and timing what must follow would no longer fit: no time to plan where the devices alone
    are slow to load (one turn of timing each), the whole share where they are quick."""
    import time

    from tvm_hetero.runtime import executor

    steps, shares, costs = [], [], []
    plan = type(toy).plan

    def recorded(self, model, devices, settings, progress):
        shares.append(progress.time_left())
        costs.append(progress.costs())
        return plan(self, model, devices, settings, progress)

    class Steps(search.Progress):
        def step(self, what, done, total):
            steps.append(what)

    monkeypatch.setattr(registry, "PACKAGES", {"toy": "toy_strategy"})
    monkeypatch.setattr(type(toy), "plan", recorded)
    db = {"db": str(tmp_path / "db.jsonl")}
    roomy = optimize(load_model("mlp:tiny"), cores, budget_s=60, runs=3, settings=db,
                     progress=Steps())  # fmt: skip
    planned = steps.index("planning with toy")
    assert steps.index("compiling cpu@0 alone") < steps.index("running cpu@0-1 alone once")
    assert steps.index("running cpu@0-1 alone once") < planned
    assert [s for s in steps[planned:] if s.startswith("compiling")] == ["compiling toy"]
    floor = roomy.phases["each device alone"]
    assert shares[0] == pytest.approx((60 - floor) * PLANNING_SHARE, abs=1.0)
    # the strategy is told what the floor measured: a compile, a load and a run on each device
    assert 0 < costs[0].compile_s < floor
    assert set(costs[0].load_s) == set(costs[0].run_s) == {"cpu@0", "cpu@1", "cpu@0-1"}
    assert all(0 <= s < floor for s in costs[0].load_s.values())
    assert all(0 < s < floor for s in costs[0].run_s.values())
    assert roomy.entries[0].name == "toy" and roomy.entries[0].samples_s
    timed = executor.interleaved_run_seconds

    def slow_to_load(deployments, repeats, rounds=5, **kwargs):
        if list(repeats) == [1] and rounds == 1:  # the floor's run of a device alone
            time.sleep(1.0)
        return timed(deployments, repeats, rounds, **kwargs)

    monkeypatch.setattr(executor, "interleaved_run_seconds", slow_to_load)
    slow = optimize(load_model("mlp:tiny"), cores, budget_s=6, runs=3, settings=db)
    # three devices alone, each turn over a second: their timing, and the toy's plan compiled
    # and timed, need more than the 6 s less the floor's 3 and more
    status = slow.entries[0].status
    assert re.fullmatch(r"not planned: each device alone took \d+ s, and timing them leaves "
                        r"no time to plan \(try --budget \d+\)", status), status  # fmt: skip
    assert len(shares) == 1 and slow.kept.kind == "single"
