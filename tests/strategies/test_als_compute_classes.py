"""Lee et al.'s operator prices pooled over devices that compute alike."""

from dataclasses import replace

import pytest

from tvm_hetero.devices import resolve_device
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.als import Costs, als_assignment, exact_assignment
from tvm_hetero.plan.dcg import DAKey
from tvm_hetero.strategies.als import planner
from tvm_hetero.zoo import load_zoo_model


def test_pooled_by_class_takes_the_median_over_a_class_and_keeps_other_classes_apart():
    samples = {
        "a": {0: [1.0, 5.0], 1: [2.0], 2: [9.0]},
        "b": {0: [3.0], 2: [4.0, 6.0]},  # device 1 cannot run it
    }
    prices = planner.pooled_by_class(samples, ["core", "core", "gpu"])
    assert prices == {"a": {0: 2.0, 1: 2.0, 2: 9.0}, "b": {0: 3.0, 2: 5.0}}


def _noisy_twins(dcg):
    """Two samples of each operator on each of two alike devices: one rate, read with noise
    that favours device 1 on every other operator (each device's own median: a third apart)."""
    samples = {}
    for k, o in enumerate(dcg.ops):
        low, high = [0.8e-3, 0.9e-3], [1.1e-3, 1.2e-3]
        samples[o] = {0: low, 1: high} if k % 2 else {0: high, 1: low}
    return samples


@pytest.mark.parametrize("solve", [als_assignment, exact_assignment])
def test_alike_devices_priced_apart_cut_on_noise_and_pooled_do_not(solve):
    model = load_zoo_model("mlp:tiny", batch=16, sizes=[32, 64, 64, 8])
    cores = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    dcg = planner.dcg_of(OpGraph.from_module(model.mod), [d.name for d in cores])
    samples = _noisy_twins(dcg)
    edges = {k: 1e-6 for k in dcg.da_edges()}
    # priced per device, as before: the noise reads as two rates and the plan cuts
    apart = Costs({o: {d: sum(t) / len(t) for d, t in per.items()} for o, per in samples.items()},
                  edges)  # fmt: skip
    assignment, apart_s = solve(dcg, apart)
    assert len(set(assignment.values())) == 2
    # pooled over the class: one rate, nothing to gain from a cut; one device, priced at it
    pooled = Costs(planner.pooled_by_class(samples, [d.compute_class for d in cores]), edges)
    assignment, pooled_s = solve(dcg, pooled)
    assert set(assignment.values()) == {0}
    assert pooled_s == pytest.approx(len(dcg.ops) * 1e-3)
    assert apart_s < pooled_s  # the cut's price was the sum of the noise's minima


def test_measure_costs_pools_a_class_for_real(tmp_path):
    """Two alike cores profiled for real: every operator one price on both."""
    from tvm_hetero.plan.profiling_paths import profiling_runs
    from tvm_hetero.profiling.profiler import profiler_for

    model = load_zoo_model("mlp:tiny")
    cores = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    dcg = planner.dcg_of(OpGraph.from_module(model.mod), [d.name for d in cores])
    profiler = profiler_for(tmp_path / "db.jsonl")
    costs = planner.measure_costs(model, cores, dcg, profiling_runs(dcg), profiler, repeats=1)
    assert all(costs.node[o][0] == costs.node[o][1] for o in dcg.ops)
    assert any(costs.node[o][0] > 0 for o in dcg.ops)
    assert all(isinstance(k, DAKey) for k in costs.edge)


def test_a_plan_on_one_device_names_that_device_alone():
    from tvm_hetero.plan.dcg import build_dcg
    from tvm_hetero.plan.placement import Placement
    from tvm_hetero.strategies.als.report import on_devices_used

    dcg = build_dcg([("a", "relax.add"), ("b", "relax.add")], [], ["x", "y"])
    on_y = Placement.of(dcg.devices, {"a": 1, "b": 1}, "als", 2.0)
    assert on_devices_used(on_y, dcg) == Placement(("y",), {}, "als", 2.0)
    home = Placement.of(dcg.devices, {"a": 0, "b": 0}, "als", 1.0)
    assert on_devices_used(home, dcg) == Placement(("x",), {}, "als", 1.0)
    cut = Placement.of(dcg.devices, {"a": 0, "b": 1}, "als", 3.0)
    assert on_devices_used(cut, dcg) is cut


def _sysfs(root, capacities):
    for core, capacity in capacities.items():
        (root / f"cpu{core}").mkdir(parents=True)
        if capacity is not None:
            (root / f"cpu{core}" / "cpu_capacity").write_text(f"{capacity}\n")
    return str(root)


def test_core_sets_of_a_big_little_board_are_two_classes(tmp_path, monkeypatch):
    from tvm_hetero.devices.discover import local_class
    from tvm_hetero.runtime import device as host
    from tvm_hetero.runtime.timer import LocalRunner

    root = _sysfs(tmp_path / "cpu", {0: 1024, 1: 1024, 2: 446, 3: 446})
    assert host.core_kinds([0, 2, 3], root) == ("1024", "446", "446")
    big, little = resolve_device("cpu@0"), replace(resolve_device("cpu@1"), cores=(2,))
    twin = replace(big, name="cpu@1", cores=(1,))
    assert big.compute_class == little.compute_class  # same target and threads...
    assert local_class(big, root) != local_class(little, root)  # ...not the same rate
    assert local_class(big, root) == local_class(twin, root)
    assert local_class(resolve_device("cpu"), root) == resolve_device("cpu").compute_class
    # their records apart too: the fingerprint that keys them names the kind of core
    monkeypatch.setattr(host, "SYSFS_CPU", root)
    fingerprint = LocalRunner().fingerprint
    assert fingerprint(big).key == fingerprint(twin).key != fingerprint(little).key
    # a machine of one kind of core (or a kernel that says nothing): classes and records as
    # they were
    for same in ({0: 1024, 1: 1024, 2: 1024}, {0: None, 1: None, 2: None}, {0: 9, 1: 9, 2: None}):
        flat = _sysfs(tmp_path / f"flat{len(list(tmp_path.iterdir()))}", same)
        assert host.core_mark([0], flat) == host.core_mark([2], flat) == ""
        assert local_class(little, flat) == little.compute_class
        monkeypatch.setattr(host, "SYSFS_CPU", flat)
        assert fingerprint(big).key == fingerprint(little).key


def test_lee_et_al_do_not_apply_to_devices_that_compute_alike():
    from tvm_hetero.strategies.registry import get_strategy

    model = load_zoo_model("mlp:tiny")
    als = get_strategy("als")
    twins = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    assert als.applicable(model, twins, None).startswith("its devices compute alike")
    unlike = [resolve_device("cpu"), resolve_device("cpu-serial")]
    assert als.applicable(model, unlike, None) is None
