"""Each CPU 3x3 convolution computed the way measured fastest on this CPU, the choice kept."""

import io
import json
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest
import tvm
from conftest import one_op_module
from tvm import relax

from tvm_hetero._compat import HOST_TRIPLE, host_cpu_name
from tvm_hetero.build import conv_choices
from tvm_hetero.build.multi_device import BuildOptions, build, lower
from tvm_hetero.passes.winograd_convolutions import candidates

HOST = {"kind": "llvm", "mtriple": HOST_TRIPLE, "mcpu": host_cpu_name(), "num-cores": 2}
OTHER = {"kind": "llvm", "mcpu": "cortex-a72", "mtriple": "aarch64-linux-gnu"}


def _conv_module(channels=32, size=28, device=HOST, bias=False):
    """``main(x) = conv2d(x, w)`` (3x3, padding 1, seeded constant ``w``), ``channels`` in and
    out: 32 channels over 28 x 28 are 14.5 MFLOPs."""
    rng = np.random.default_rng(3)
    w = relax.const(rng.standard_normal((channels, channels, 3, 3)).astype("float32"))
    b = relax.const(rng.standard_normal((1, channels, 1, 1)).astype("float32"))

    def conv(x):
        y = relax.op.nn.conv2d(x, w, padding=(1, 1))
        return relax.op.add(y, b) if bias else y

    return one_op_module(device, [("x", (1, channels, size, size))], conv)


def _winograd_tiles(lowered):
    """The tile sizes of the module's Winograd output kernels (their outputs' second axis)."""
    bindings = [b for block in lowered["main"].body.blocks for b in block.bindings]
    return sorted(
        int(b.var.ty.shape.values[1])
        for b in bindings
        if isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"
        and b.value.args[0].name_hint == "winograd_output"
    )  # fmt: skip


class Fake:
    """A measurement the test decides: each way's milliseconds (None: nothing kept), and the
    workloads it was asked for."""

    def __init__(self, times):
        self.times, self.calls = times, []

    def __call__(self, workloads):
        self.calls += list(workloads)
        return None if self.times is None else {w.key: dict(self.times) for w in workloads}


@pytest.fixture
def small_floor(monkeypatch):
    """Measure convolutions of 1 MFLOP and more (the tests' are small)."""
    monkeypatch.setattr(conv_choices, "MIN_FLOPS", 1e6)


@pytest.mark.parametrize(("times", "tile"), [({4: 3.0, 2: 1.0, 0: 2.0}, 2),
                                             ({4: 1.0, 2: 2.0, 0: 3.0}, 4),
                                             ({4: 3.0, 2: 2.0, 0: 1.0}, 0),
                                             ({4: 1.0, 2: 0.9, 0: 0.85}, 4),
                                             ({4: 1.0, 2: 0.9, 0: 0.79}, 0)])  # fmt: skip
def test_the_fastest_way_is_chosen_and_the_times_kept(tmp_path, small_floor, times, tile):
    """The static rule takes 4 x 4 tiles here (28 x 28: 49 of them): another way must run a
    fifth faster to be chosen."""
    cache = tmp_path / "conv3x3.json"
    fake = Fake(times)
    mod = _conv_module()
    (key,) = candidates(mod)
    assert conv_choices.measured_tiles(mod, cache, fake) == {key: tile}
    assert len(fake.calls) == 1
    kept = json.loads(cache.read_text())["choices"]
    (entry,) = kept.values()
    assert entry == {"ms": {str(k): v for k, v in times.items()}}
    again = Fake({4: 0.0, 2: 9.0, 0: 9.0})
    assert conv_choices.measured_tiles(mod, cache, again) == {key: tile}
    assert again.calls == []  # read from the cache, not measured again


def test_a_damaged_cache_is_measured_again_and_rewritten(tmp_path, small_floor):
    cache = tmp_path / "conv3x3.json"
    for text in ("{not json", json.dumps({"format": 1, "choices": {"k": {"tile": 3}}}), "[]"):
        cache.write_text(text)
        fake = Fake({4: 1.0, 2: 2.0, 0: 3.0})
        assert list(conv_choices.measured_tiles(_conv_module(), cache, fake).values()) == [4]
        assert len(fake.calls) == 1
        assert json.loads(cache.read_text())["format"] == conv_choices.FORMAT


def test_choices_of_other_shapes_are_kept_beside_new_ones(tmp_path, small_floor):
    cache = tmp_path / "conv3x3.json"
    conv_choices.measured_tiles(_conv_module(size=28), cache, Fake({4: 1.0, 2: 2.0, 0: 3.0}))
    conv_choices.measured_tiles(_conv_module(size=20), cache, Fake({4: 3.0, 2: 2.0, 0: 1.0}))
    assert len(json.loads(cache.read_text())["choices"]) == 2
    unused = Fake({4: 9.0, 2: 9.0, 0: 0.1})
    for size, tile in ((28, 4), (20, 0)):
        assert list(conv_choices.measured_tiles(_conv_module(size=size), cache, unused).values()) \
            == [tile]  # fmt: skip
    assert unused.calls == []


def test_the_margin_applies_to_the_kept_times(tmp_path, small_floor, monkeypatch):
    """The cache keeps each way's time, not the choice: a later margin decides anew."""
    cache = tmp_path / "conv3x3.json"
    mod = _conv_module()
    assert list(conv_choices.measured_tiles(mod, cache, Fake({4: 1.0, 2: 0.9, 0: 0.7}))
                .values()) == [0]  # fmt: skip
    monkeypatch.setattr(conv_choices, "MARGIN", 0.5)
    assert list(conv_choices.measured_tiles(mod, cache, Fake(None)).values()) == [4]


@pytest.mark.parametrize(("ms", "static", "way"), [({4: 1.0, 2: 0.81, 0: 2.0}, 4, 4),
                                                   ({4: 1.0, 2: 0.79, 0: 2.0}, 4, 2),
                                                   ({4: 2.0, 2: 1.0, 0: 0.7}, 0, 0),
                                                   ({4: 1.0, 2: 2.0, 0: 1.3}, 0, 4)])  # fmt: skip
def test_another_way_must_run_a_fifth_faster_than_the_rules(ms, static, way):
    assert conv_choices.choose(ms, static) == way


def test_small_convolutions_and_other_cpus_are_not_measured(tmp_path):
    """Below ``MIN_FLOPS`` (14.5 MFLOPs here) and for a CPU that is not this one the static
    rule decides; nothing is written."""
    cache = tmp_path / "conv3x3.json"
    fake = Fake({4: 1.0, 2: 2.0, 0: 3.0})
    assert _workload().flops == 2 * 32 * 32 * 9 * 28 * 28
    assert conv_choices.measured_tiles(_conv_module(), cache, fake) == {}
    conv_choices.MIN_FLOPS, floor = 1e6, conv_choices.MIN_FLOPS
    try:
        assert conv_choices.measured_tiles(_conv_module(device=OTHER), cache, fake) == {}
    finally:
        conv_choices.MIN_FLOPS = floor
    assert fake.calls == [] and not cache.exists()


def test_a_module_without_convolutions_has_none_to_measure():
    mod = one_op_module(HOST, [("x", (4, 4))], relax.op.nn.relu)
    assert candidates(mod) == {}


def test_the_build_computes_the_kept_choice(tmp_path, small_floor):
    """A convolution the static rule takes as 4 x 4 tiles (28 x 28: 49 of them), built with a
    cache that says the rule's kernel is fastest, has no Winograd kernel; with one that says
    2 x 2 tiles, those; the numbers equal the static build's."""
    cache = tmp_path / "conv3x3.json"
    mod = _conv_module(bias=True)
    static = lower(mod, BuildOptions(conv3x3="rule"))
    assert _winograd_tiles(static) == [4]
    x = np.random.default_rng(0).standard_normal((1, 32, 28, 28)).astype("float32")
    want = _run(build(mod, BuildOptions(conv3x3="rule")), x)
    for times, tiles in (({4: 2.0, 2: 3.0, 0: 1.0}, []), ({4: 2.0, 2: 1.0, 0: 3.0}, [2])):
        cache.unlink(missing_ok=True)
        conv_choices.measured_tiles(mod, cache, Fake(times))
        options = BuildOptions(conv3x3="measure", conv_cache=str(cache))
        assert _winograd_tiles(lower(mod, options)) == tiles
        got = _run(build(mod, options), x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_a_measurement_that_keeps_nothing_leaves_the_static_rule_and_no_file(tmp_path,
                                                                             small_floor):  # fmt: skip
    cache = tmp_path / "conv3x3.json"
    fake = Fake(None)
    assert conv_choices.measured_tiles(_conv_module(), cache, fake) == {}
    assert len(fake.calls) == 1 and not cache.exists()


def _workload(**kwargs):
    ((key, call),) = candidates(_conv_module(**kwargs)).items()
    return conv_choices.Workload.of(key, call)


def test_a_workload_is_what_the_measuring_process_rebuilds():
    work = _workload(size=20)
    assert (work.data, work.weight, work.padding) == ((1, 32, 20, 20), (32, 32, 3, 3),
                                                      (1, 1, 1, 1))  # fmt: skip
    assert work.target == str(tvm.target.Target(HOST)) and work.key.endswith(work.target)
    layer = conv_choices._one_layer(work)
    assert candidates(layer).keys() == {work.key}


def test_the_largest_shapes_are_measured_first(tmp_path, small_floor):
    """Two convolutions in one module, the smaller first: the measurement is asked for the
    larger first (a build's budget goes to the layers that cost most)."""
    rng = np.random.default_rng(0)
    w1 = relax.const(rng.standard_normal((64, 32, 3, 3)).astype("float32"))
    w2 = relax.const(rng.standard_normal((64, 64, 3, 3)).astype("float32"))

    def two_convs(x):
        return relax.op.nn.conv2d(relax.op.nn.conv2d(x, w1, padding=(1, 1)), w2, padding=(1, 1))

    fake = Fake({4: 1.0, 2: 2.0, 0: 3.0})
    conv_choices.measured_tiles(
        one_op_module(HOST, [("x", (1, 32, 28, 28))], two_convs), tmp_path / "c.json", fake
    )
    assert [w.weight[1] for w in fake.calls] == [64, 32]
    assert fake.calls[0].flops == 2 * fake.calls[1].flops


@pytest.mark.parametrize(("budget", "measured"), [(0.0, 1), (1e6, 3)])
def test_the_measuring_process_stops_starting_shapes_when_its_budget_is_spent(
    monkeypatch, capsys, budget, measured
):
    """The measuring process times the shapes in the order given until :data:`BUDGET_S` has
    passed (at least one); the others are not in its answer (a later build measures them)."""
    works = [_workload(size=size) for size in (20, 24, 28)]
    monkeypatch.setattr(conv_choices, "BUDGET_S", budget)
    monkeypatch.setattr(conv_choices, "time_ways", lambda work: {4: 1.0, 2: 2.0, 0: 3.0})
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps([asdict(w) for w in works])))
    assert conv_choices.main() == 0
    answer = json.loads(capsys.readouterr().out)
    assert list(answer) == [w.key for w in works[:measured]]


def test_a_way_far_slower_after_the_first_rounds_is_timed_no_more(monkeypatch):
    """After :data:`FIRST_ROUNDS` rounds of every way, only those within :data:`SLOWER` times
    the fastest's median are timed in the other rounds; each way's figure is the median of its
    own rounds."""
    asked = []

    def rounds(executables, _args, count):
        asked.append((list(executables), count))
        row = {4: 1.0, 2: 1.5, 0: 5.0}  # seconds a run, the rule's kernel far slower
        return [[row[w] for w in executables]] * count

    monkeypatch.setattr(conv_choices, "build", lambda _mod, options: options.winograd_tiles[0][1])
    monkeypatch.setattr(conv_choices, "cold_rounds", rounds)
    times = conv_choices.time_ways(_workload(size=20))
    first, rest = conv_choices.FIRST_ROUNDS, conv_choices.ROUNDS - conv_choices.FIRST_ROUNDS
    assert asked == [([4, 2, 0], first), ([4, 2], rest)]
    assert times == {4: 1000.0, 2: 1500.0, 0: 5000.0}


@pytest.mark.whole_machine  # two threads a build: another test's on the cores made one 14x
def test_time_ways_times_each_way_on_this_cpu():
    """A real measurement: three builds of the layer alone, each timed after the cache was
    written over; every way takes time and none is ten times another (the same work)."""
    times = conv_choices.time_ways(_workload(size=20))
    assert sorted(times) == [0, 2, 4]
    assert all(t > 0 for t in times.values())
    assert max(times.values()) < 10 * min(times.values())


@pytest.mark.whole_machine
def test_the_measuring_process_answers_on_a_quiet_machine_and_nothing_on_a_busy_one():
    """Alone on the machine the process times each way; with another process spinning on a
    core (half of two) its figures are not kept."""
    work = _workload(size=20)
    times = conv_choices.measure_apart([work])
    assert times is not None and sorted(times[work.key]) == [0, 2, 4]
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert conv_choices.measure_apart([work]) is None
    finally:
        spinner.kill()
        spinner.wait()


def test_static_builds_record_their_own_mode():
    assert BuildOptions(conv3x3="rule").mode_key.endswith("+static3x3")
    assert "+" not in BuildOptions().mode_key
    with pytest.raises(ValueError, match="choose from rule, measure"):
        BuildOptions(conv3x3="fast")


def _run(ex, x):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_lower_runs_the_pipeline_in_two_halves_around_the_winograd_pass():
    """``lower`` looks at the module between the halves (the candidates as the pass sees
    them) without running the passes before it twice."""
    from tvm_hetero.pipelines import PIPELINES

    whole = PIPELINES["multi_device_lower"]
    head, tail = whole.split("WinogradConvolutions")
    assert head.steps + tail.steps == whole.steps
    assert tail.steps[0].name == "WinogradConvolutions"
    assert (head.params, head.defaults) == ((), {})
    assert (tail.params, tail.defaults) == (("winograd_tiles",), {"winograd_tiles": {}})
