"""EOP's measuring glue: inputs from real measurements, every strategy's plan, key-op timings."""

import dataclasses

import pytest

from tvm_hetero.plan.placement import Placement
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.records import RecordKind
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.strategies import base
from tvm_hetero.strategies.base import OutOfTime, SearchCosts
from tvm_hetero.strategies.eop import planner as eop
from tvm_hetero.zoo import load_zoo_model


def test_measure_plan_every_strategy_and_time_the_key_operators(tmp_path, two_cpus):
    model = load_zoo_model("mlp:tiny", batch=16, sizes=[32, 64, 8])
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=MeasureConfig(3, 2))
    inputs = eop.measure_inputs(model, two_cpus, profiler, samples=4)
    assert set(inputs.devices) == {"cpu", "cpu:1"} and not inputs.link.concurrent
    assert inputs.keys and all(k.options for k in inputs.keys)
    assert (tmp_path / "patterns.json").exists() and inputs.fits
    plans = {s: eop.plan(inputs, s) for s in eop.STRATEGIES}
    same_home = [plans[s].predicted_s for s in ("equal", "fixed", "home")]
    assert plans["eop"].predicted_s <= min(same_home) + 1e-12
    assert all(s.shares[1] for s in plans["equal"].splits)
    assert plans["other"].devices == inputs.devices[::-1]
    # every device's operator times add up to the model's run there (the instrumented run's level
    # is off: a timer per operator)
    for name, op_s in zip(inputs.devices, inputs.op_s, strict=True):
        dev = next(d for d in two_cpus if d.name == name)
        run = profiler.profile_run(model, [dev], Placement((name,))).median_s  # served, not timed
        assert sum(op_s.values()) == pytest.approx(run)
    for key in inputs.keys:  # whole, a key operator costs its pattern at the device's level
        option = key.options[0]
        for k in (0, 1):
            assert option.time[k](option.extent) == pytest.approx(inputs.op_s[k][key.node_id])
    assert plans["home"].predicted_s == pytest.approx(sum(inputs.op_s[0].values()), rel=0.01)
    timed = eop.measured_key_ops(model, two_cpus, plans["equal"])
    assert set(timed) == {k.node_id for k in inputs.keys} and min(timed.values()) > 0
    with pytest.raises(ValueError, match="unknown strategy 'best'"):
        eop.plan(inputs, "best")
    with pytest.raises(ValueError, match="samples must be >= 3"):
        eop.measure_inputs(model, two_cpus, profiler, samples=2)
    with pytest.raises(ValueError, match="exactly two devices"):
        eop.measure_inputs(model, two_cpus[:1], profiler)


def test_sweeps_stop_when_the_time_left_is_spent(tmp_path, two_cpus):
    """With no time left after the first sweep, only the longest key operator is swept; the
    others stay whole on the home device and EOP still plans."""
    model = load_zoo_model("mlp:tiny", batch=16, sizes=[32, 64, 64, 8])
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=MeasureConfig(3, 2))
    every = eop.measure_inputs(model, two_cpus, profiler, key_share=1.0, samples=3)
    assert len(every.keys) >= 2 and not every.unswept
    cut = eop.measure_inputs(model, two_cpus, profiler, 1.0, 3, time_left=lambda: 0.0)
    swept = [k.node_id for k in cut.keys]
    assert len(swept) == 1 and sorted(swept + list(cut.unswept)) == sorted(
        k.node_id for k in every.keys
    )
    assert eop.plan(cut).predicted_s > 0


def test_in_a_search_eop_measures_what_fits_in_its_share(tmp_path, two_cpus):
    """In a search (its ``costs``), the per-operator runs of each device are not begun where
    they would end past the time left (nothing is measured), and are not priced once the
    database holds them; each device's runs of the whole model are as many as fit in
    ``RUNS_WITHIN_S`` by the search's run of it, five at least."""
    model = load_zoo_model("mlp:tiny", batch=16, sizes=[32, 64, 8])
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=MeasureConfig(3, 2))
    slow = SearchCosts(compile_s=10.0, load_s={}, run_s={d.name: 2.5 for d in two_cpus})
    need = 2 * (10.0 + 4 * 2.5)  # two devices: a compile, a warm-up and three runs each
    with pytest.raises(OutOfTime, match=f"each device would take {need:.0f} s or more"):
        eop.measure_inputs(model, two_cpus, profiler, samples=3, time_left=lambda: need / 2 - 1,
                           costs=slow)  # fmt: skip
    assert profiler.misses == 0
    eop.measure_inputs(model, two_cpus, profiler, samples=3, costs=slow)  # no time limit
    runs = profiler.db.query(kind=RecordKind.MODEL)
    assert base.RUNS_WITHIN_S == 10.0 and len(runs) == 2
    assert {r.repeat for r in runs} == {5}  # four runs of 2.5 s fit in ten; five at least
    measured = profiler.misses
    again = eop.measure_inputs(model, two_cpus, profiler, samples=3, time_left=lambda: 0.0,
                               costs=slow)  # fmt: skip
    assert again.op_s and profiler.misses == measured  # served by the database: not stopped


def test_a_crossing_between_machines_is_priced_by_the_clusters_path():
    """Between two workers of a cluster: its path (the slowest link's bandwidth, the latencies
    summed), not a copy timed in this process; no measurement is made. Without a cluster, or
    for workers of one process, the profiler measures as before."""
    import dataclasses

    from tvm_hetero.devices import cpu_device
    from tvm_hetero.devices.cluster import ClusterSpec, Link, Topology

    a, b, c = (dataclasses.replace(cpu_device(0), name=n, host=f"10.0.0.{k}:9190")
               for k, n in enumerate("abc", 1))  # fmt: skip
    cluster = ClusterSpec((a, b, c), (Link("a", "b", 100.0, 2.0), Link("b", "c", 40.0, 0.5)),
                          Topology.RING)  # fmt: skip

    class Unmeasured:
        def __getattr__(self, name):
            raise AssertionError(f"measured: {name}")

    fit = eop.crossing(a, c, Unmeasured(), cluster)
    hops = cluster.route("a", "c")
    assert fit.latency_s == pytest.approx(sum(ln.latency_ms for ln in hops) / 1e3)
    assert fit.bandwidth_bps == pytest.approx(min(ln.bandwidth_mbps for ln in hops) * 1e6 / 8)
    assert eop.route_fit(a, b, cluster).bandwidth_bps == pytest.approx(12.5e6)
    assert set(eop.crossings([a, b, c], Unmeasured(), cluster=cluster)) == {
        (i, j) for i in range(3) for j in range(3) if i != j
    }
    with pytest.raises(AssertionError, match="measured"):
        eop.crossing(a, c, Unmeasured())  # no cluster: the fitted copies, measured


def test_eop_does_not_apply_to_a_clusters_workers(tmp_path):
    """Its per-operator runs are timed in this process: on a cluster's devices they were timed
    here under the workers' names. The profiler refuses them too."""
    import dataclasses

    from tvm_hetero.devices import cpu_device
    from tvm_hetero.strategies.eop import STRATEGY

    model = load_zoo_model("mlp:tiny")
    remote = [dataclasses.replace(cpu_device(k), name=f"e{k}", host=f"10.0.0.{k + 1}:9190")
              for k in range(2)]  # fmt: skip
    assert "cluster" in STRATEGY.applicable(model, remote, None)
    assert STRATEGY.applicable(model, [cpu_device(0), cpu_device(1)], None) is None
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"))
    profiler._remote_fps[remote[0].name] = profiler.runner.fingerprint(remote[0])  # no worker
    with pytest.raises(ValueError, match="not over RPC"):
        profiler.profile_op_times(model.mod, remote[:1])


def test_the_confirmation_keeps_the_fastest_of_the_plan_and_each_device_alone(
    tmp_path, monkeypatch
):  # fmt: skip
    """EOP's plan, the home device alone and the other alone are compiled and timed in rounds
    on two one-core workers; the fastest median is kept (``eop-NAME`` when a device alone won);
    a plan that cuts nothing is the home device alone and is not timed."""
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.runtime import executor
    from tvm_hetero.strategies.eop.confirm import confirm_by_measurement
    from tvm_hetero.strategies.eop.report import plans as every_plan

    cores = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    model = load_zoo_model("mlp:tiny", batch=16, sizes=[32, 64, 8])
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=MeasureConfig(3, 2))
    plans = every_plan(eop.measure_inputs(model, cores, profiler, samples=3), 0.01)
    plans["eop"] = dataclasses.replace(plans["equal"], strategy="eop")  # a plan that cuts
    kept, seconds = confirm_by_measurement(model, cores, plans, repeat=6)
    assert set(seconds) == {"eop", "home", "other"} and min(seconds.values()) > 0
    fastest = min(seconds, key=seconds.get)
    assert kept.strategy == ("eop" if fastest == "eop" else f"eop-{fastest}")
    assert kept.splits == plans[fastest].splits
    runs = iter([[(3.0,) * 2, (1.0,) * 2, (2.0,) * 2]])  # as timed: the home device fastest
    monkeypatch.setattr(executor, "interleaved_run_seconds", lambda *a, **k: next(runs))
    kept, seconds = confirm_by_measurement(model, cores, plans, repeat=6)
    assert kept.strategy == "eop-home" and kept.devices == plans["home"].devices
    assert seconds == {"eop": 3.0, "home": 1.0, "other": 2.0}
    whole = {**plans, "eop": plans["home"]}
    assert confirm_by_measurement(model, cores, whole) == (plans["home"], {})
