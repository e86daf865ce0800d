"""A program per worker: the split of a deployment into programs (pure), and runs by programs."""

import contextlib
import itertools
import random
import threading
import time

import numpy as np
import pytest
import tvm
import tvm_ffi

from tvm_hetero import api
from tvm_hetero.devices import resolve_device
from tvm_hetero.errors import RunError
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.ir.workloads import chain_module
from tvm_hetero.plan import Placement
from tvm_hetero.runtime.deployment import Deployment, Step
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.inputs import InputSpec
from tvm_hetero.runtime.native_programs import NativeRunner
from tvm_hetero.runtime.programs import Latch, NotProgrammable, worker_programs

DEVICES = (resolve_device("cpu@0"), resolve_device("cpu@1"), resolve_device("cpu"))


def _deployment(steps, outputs):
    return Deployment(
        "t", DEVICES, (InputSpec("x", (4,), "float32"),), tuple(outputs), tuple(steps)
    )


def test_each_step_runs_on_its_owner_and_waits_only_for_other_threads():
    """a on 0; copied to 1 (the copy runs on 1, which pulls); b on 1 returns a pair; its first
    item is made where the pair was (1); copied home (on 0); c on 0 reads it and a."""
    steps = [
        Step("unit", "a", ("x",), 0, "u0"),
        Step("copy", "a1", ("a",), 1),
        Step("unit", "b", ("a1",), 1, "u1"),
        Step("item", "b0", ("b",), index=0),
        Step("copy", "b00", ("b0",), 0),
        Step("unit", "c", ("b00", "a"), 0, "u2"),
    ]
    programs = worker_programs(_deployment(steps, ["c"]), [0, 1])
    assert programs.owner == (0, 1, 1, 1, 0, 0)
    assert programs.steps == {0: (0, 4, 5), 1: (1, 2, 3)}
    # two hand-overs: a to worker 1 (latch 0), b's item to worker 0 (latch 1)
    assert programs.waits == ((), (0,), (), (), (1,), ())
    assert programs.sets == ((0,), (), (), (1,), (), ())
    assert programs.handovers == 2


def test_a_copy_onto_a_device_without_a_worker_runs_where_its_source_was_made():
    steps = [Step("unit", "a", ("x",), 1, "u0"), Step("copy", "home", ("a",), 0)]
    programs = worker_programs(_deployment(steps, ["home"]), [1])
    assert programs.owner == (1, 1)
    assert programs.handovers == 0
    with pytest.raises(ValueError, match="no worker"):
        worker_programs(_deployment(steps, ["home"]), [0])


def _random_deployment(rng: random.Random, n: int) -> Deployment:
    values, steps, on = ["x"], [], {"x": 0}  # a value -> its device (x: home)
    for i in range(n):
        kind = rng.choice(["unit", "unit", "copy"])
        name = f"v{i}"
        if kind == "copy":  # onto another device than its source's
            source = rng.choice(values)
            on[name] = rng.choice([k for k in range(3) if k != on[source]])
            steps.append(Step("copy", name, (source,), on[name]))
        else:
            inputs = tuple(rng.sample(values, min(len(values), rng.randint(1, 3))))
            on[name] = rng.randrange(3)
            steps.append(Step("unit", name, inputs, on[name], f"f{i}"))
        values.append(name)
    return _deployment(steps, [values[-1]])


def test_remote_workers_get_their_values_sent_and_local_threads_pull_theirs():
    """Device 0 local, 1 and 2 remote. a (local) goes to worker 1 as its copy a1 (the local
    thread sends it); the input x too (the caller sends it); b's copy onto 2 is pushed by 1;
    c's copy home is pulled by the local thread; nothing waits on a latch."""
    steps = [
        Step("unit", "a", ("x",), 0, "u0"),
        Step("copy", "a1", ("a",), 1),
        Step("unit", "b", ("a1", "x"), 1, "u1"),
        Step("copy", "b2", ("b",), 2),
        Step("unit", "c", ("b2",), 2, "u2"),
        Step("copy", "c0", ("c",), 0),
        Step("unit", "d", ("c0", "a"), 0, "u3"),
    ]
    programs = worker_programs(_deployment(steps, ["d"]), [0, 1, 2], remote=[1, 2])
    assert programs.owner == (0, 0, 1, 2, 2, 0, 0)
    assert programs.holder == (0, 1, 1, 2, 2, 0, 0)  # a1 is held where it was sent
    assert programs.sends == (((1, "a1"),), (), ((2, "b2"),), (), (), (), ())
    assert programs.start_sends == (("x", 1, "x"),)
    assert programs.handovers == 0
    assert programs.forwarded == frozenset()
    # 2 would pass on what 1 made, to a unit of 1
    relayed = [*steps[:4], Step("copy", "b1", ("b2",), 1), Step("unit", "e", ("b1",), 1, "u4")]
    with pytest.raises(NotProgrammable):
        worker_programs(_deployment(relayed, ["e"]), [0, 1, 2], remote=[1, 2])


def test_an_output_copied_from_one_remote_worker_onto_another_is_taken_where_it_was_made():
    """c (on 2) copied home onto 1 and read by nothing: not sent (its value is c's, held on 2,
    which answers with it); copied again onto 1 for a unit there, it is sent."""
    steps = [
        Step("unit", "a", ("x",), 1, "u0"),
        Step("copy", "a2", ("a",), 2),
        Step("unit", "c", ("a2",), 2, "u1"),
        Step("copy", "c1", ("c",), 1),
    ]
    programs = worker_programs(_deployment(steps, ["c1"]), [1, 2], remote=[1, 2])
    assert programs.forwarded == {3}
    assert programs.owner == (1, 2, 2, 2)
    assert programs.holder == (1, 2, 2, 2)
    assert programs.sends == (((2, "a2"),), (), (), ())
    assert programs.waits == ((), (), (), ())
    read = [*steps[:3], Step("copy", "c1", ("c",), 1), Step("unit", "d", ("c1",), 1, "u2")]
    programs = worker_programs(_deployment(read, ["d"]), [1, 2], remote=[1, 2])
    assert programs.forwarded == frozenset()
    assert programs.holder == (1, 2, 2, 1, 1)
    assert programs.sends == (((2, "a2"),), (), ((1, "c1"),), (), ())


def _ready(dep, programs, i, done, latches, delivered):
    """Whether step ``i`` can run: a local one when its latches are set and what it pulls from
    remote workers exists; a remote one when each input held elsewhere has been sent there (a
    copy onto a remote worker is held there, whoever sent it)."""
    step, owner, remote = dep.steps[i], programs.owner, programs.remote
    index = {s.name: j for j, s in enumerate(dep.steps)}
    held = {
        s.name: s.device if s.kind == "copy" and s.device in remote else owner[j]
        for j, s in enumerate(dep.steps)
    }
    if i in programs.forwarded:  # an output no step reads: its source's value, where it is
        return index[step.inputs[0]] in done
    if owner[i] not in remote:
        pulled = {index[v] for v in step.inputs if v in index and held[v] in remote}
        return set(programs.waits[i]) <= latches and pulled <= done
    if step.kind == "copy":
        return (step.device, step.name) in delivered
    return all(
        index[v] in done if held.get(v) == owner[i] else (owner[i], v) in delivered
        for v in step.inputs
    )


@pytest.mark.parametrize("seed", range(60))
def test_programs_of_random_graphs_finish_in_any_interleaving_and_respect_every_input(seed):
    """Brute force: the workers (a random set of them remote) take turns in a random order,
    each running its next step when it can (:func:`_ready`: latches, pulls, sent values).
    Every interleaving finishes (no two programs wait on each other, every value a remote
    worker reads is sent there), and no step ever runs before a step that makes one of its
    inputs (checked against the deployment's inputs, not the programs)."""
    rng = random.Random(seed)
    dep = _random_deployment(rng, rng.randint(1, 25))
    index = {s.name: i for i, s in enumerate(dep.steps)}
    remote = [k for k in range(3) if rng.random() < 0.5]
    try:
        programs = worker_programs(dep, [0, 1, 2], remote)
    except NotProgrammable:
        assert remote
        return
    assert sorted(i for steps in programs.steps.values() for i in steps) == list(
        range(len(dep.steps))
    )
    read = {v for s in dep.steps for v in s.inputs}
    for i in programs.forwarded:  # only copies between remote workers that nothing reads
        step = dep.steps[i]
        assert step.kind == "copy" and step.device in remote and step.name not in read
        assert programs.holder[i] == programs.holder[index[step.inputs[0]]] in remote
    done, latches, position = set(), set(), dict.fromkeys(programs.steps, 0)
    delivered = {(k, name) for _, k, name in programs.start_sends}
    while len(done) < len(dep.steps):
        ready = [
            k for k, steps in programs.steps.items() if position[k] < len(steps)
            and _ready(dep, programs, steps[position[k]], done, latches, delivered)
        ]  # fmt: skip
        assert ready, f"programs wait on each other: {position}"
        k = rng.choice(ready)
        i = programs.steps[k][position[k]]
        assert {index[v] for v in dep.steps[i].inputs if v in index} <= done
        done.add(i)
        latches |= set(programs.sets[i])
        delivered |= set(programs.sends[i])
        position[k] += 1


def test_a_latch_wakes_every_waiter_and_times_out_unset():
    latch, woken = Latch(), []
    assert not latch.wait(0.01)
    threads = [threading.Thread(target=lambda: woken.append(latch.wait(5))) for _ in range(3)]
    for t in threads:
        t.start()
    latch.set()
    latch.set()  # twice is harmless
    for t in threads:
        t.join(5)
    assert woken == [True] * 3
    assert latch.wait(0)


@pytest.fixture(scope="module")
def chain():
    """Eight additions alternating between cpu@0 and cpu@1: eight units, seven hand-overs."""
    model = load_model(chain_module(8), name="chain")
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    placement = Placement(("cpu@0", "cpu@1"), {n: 1 for i, n in enumerate(ids) if i % 2})
    devices = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    return api.compile(model, devices, placement).deployment


@contextlib.contextmanager
def _slowed(executor, device, function):
    """Every unit of worker ``device`` called through ``function(call, args)`` meanwhile:
    in the native plan, or through the worker's ``call`` (the Python programs)."""
    runner, worker = executor._runner, executor.workers[device]
    if isinstance(runner, NativeRunner):
        mine = [(k, worker.vm.module[name]) for k, (d, name) in enumerate(runner.functions)
                if d == device]  # fmt: skip
        for k, unit in mine:
            runner.replace(k, tvm_ffi.convert(lambda *a, unit=unit: function(unit, a)))
    else:
        call = worker.call
        worker.call = lambda fn, args: function(lambda *a: call(fn, a), args)
    try:
        yield
    finally:
        if isinstance(runner, NativeRunner):
            for k, unit in mine:
                runner.replace(k, unit)
        else:
            worker.call = call


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_pipelined_run_keeps_each_workers_microbatches_in_order(chain, native):
    x = [np.full((8,), k, "float32") for k in range(4)]
    with Executor(chain, native=native) as executor:
        assert isinstance(executor._runner, NativeRunner) == native
        tensors = [[tvm.runtime.tensor(a)] for a in x]
        values = executor.run_many(tensors)
        for k, run in enumerate(values):
            np.testing.assert_array_equal(executor.outputs_of(run)[0], x[k] + 8)
        assert len(executor.timeline.events) == 4 * len(chain.units)
        assert len(executor.finished_s) == 4
        for worker in ("cpu@0", "cpu@1"):
            mine = sorted((e for e in executor.timeline.events if e.worker == worker),
                          key=lambda e: e.start_s)  # fmt: skip
            assert all(a.end_s <= b.start_s for a, b in itertools.pairwise(mine))
            for step in {e.step for e in mine}:  # each unit takes the microbatches in order
                batches = [e.microbatch for e in mine if e.step == step]
                assert batches == sorted(batches)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_worker_goes_on_with_the_next_microbatch_while_its_last_step_waits(chain, native):
    """cpu@0 starts and ends the chain: while microbatch 0's last unit waits for a slow cpu@1,
    cpu@0 runs microbatch 1's first unit (it used to finish microbatch 0 first, so the two
    workers never overlapped)."""
    with Executor(chain, native=native) as executor:
        with _slowed(executor, 1, lambda call, args: (time.sleep(0.05), call(*args))[1]):
            executor.run_many([[tvm.runtime.tensor(np.zeros(8, "float32"))]] * 3)
        units = [e for e in executor.timeline.events if e.kind == "unit"]
        first1 = min((e for e in units if e.worker == "cpu@0" and e.microbatch == 1),
                     key=lambda e: e.start_s)  # fmt: skip
        last0 = max((e for e in units if e.microbatch == 0), key=lambda e: e.end_s)
        assert first1.start_s < last0.end_s


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_frozen_worker_fails_the_run_within_the_timeout_naming_it(chain, native):
    """Worker cpu@1 stops answering in the middle of the chain: the run fails within the
    timeout, naming it, and the other worker is not left waiting for its value; once the
    frozen unit returns, the next run works."""
    with Executor(chain, timeout_s=0.5, native=native) as executor:
        x = {"x": np.zeros((8,), "float32")}
        executor.run(x)
        frozen = threading.Event()
        with _slowed(executor, 1, lambda call, args: (frozen.wait(2), call(*args))[1]):
            start = time.perf_counter()
            with pytest.raises(RunError, match="cpu@1 did not finish unit") as err:
                executor.run(x)
            assert time.perf_counter() - start < 1.8
            assert err.value.device == "cpu@1"
            with pytest.raises(RunError, match="cpu@1 did not finish unit"):
                executor.run(x)  # still in it
        frozen.set()  # the frozen call returns; the workers are free again
        time.sleep(0.5)
        np.testing.assert_array_equal(executor.run(x)[0], np.full((8,), 8, "float32"))


def test_a_failing_unit_fails_the_native_run_naming_it_and_the_next_run_works(chain):
    def fail(call, args):
        raise ValueError("no such luck")

    with Executor(chain, timeout_s=5) as executor:
        x = {"x": np.zeros((8,), "float32")}
        with _slowed(executor, 1, fail):
            start = time.perf_counter()
            with pytest.raises(RunError, match=r"unit '\S+' on cpu@1 failed: .*no such luck"):
                executor.run(x)
            assert time.perf_counter() - start < 1.0  # cpu@0 stopped waiting at once
        np.testing.assert_array_equal(executor.run(x)[0], np.full((8,), 8, "float32"))


def test_native_and_python_programs_compute_the_same_on_a_model_split_four_ways():
    """ResNet-18 (tiny) with every operator on one of four workers at random: four programs,
    many hand-overs, three microbatches: the native run equals the Python one and one device."""
    from tvm_hetero.zoo import load_zoo_model

    model = load_zoo_model("resnet18:tiny")
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    rng = random.Random(3)
    names = ("cpu@0", "cpu@1", "cpu", "cpu:1")
    placement = Placement(names, {n: rng.randrange(4) for n in ids})
    devices = [resolve_device(n) for n in names]
    split = api.compile(model, devices, placement).deployment
    alone = api.compile(model, [resolve_device("cpu")]).deployment
    inputs = [model.random_inputs(seed=k) for k in range(3)]
    with Executor(alone) as one:
        expected = [one.run(x) for x in inputs]
    for native in (True, False):
        with Executor(split, native=native) as executor:
            assert isinstance(executor._runner, NativeRunner) == native
            tensors = [executor.place_inputs(x) for x in inputs]
            for k, run in enumerate(executor.run_many(tensors)):
                for got, want in zip(executor.outputs_of(run), expected[k], strict=True):
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_without_the_native_library_the_python_programs_run(chain, monkeypatch):
    from tvm_hetero.runtime import native_programs

    monkeypatch.setitem(native_programs._loaded, native_programs.SOURCE, "TVM_HETERO_NATIVE=0")
    assert native_programs.unavailable() == "TVM_HETERO_NATIVE=0"
    with Executor(chain) as executor:
        assert type(executor._runner).__name__ == "ProgramRunner"
        np.testing.assert_array_equal(executor.run({"x": np.zeros(8, "float32")})[0], np.full(8, 8))


def test_the_native_library_is_built_once_and_a_failing_compiler_is_reported(
    tmp_path, monkeypatch
):  # fmt: skip
    from tvm_hetero.runtime import native_build, native_programs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = native_build.build_native(native_programs.SOURCE)
    assert built.parent == tmp_path / "tvm-hetero" / "native" and built.exists()
    stamp = built.stat().st_mtime_ns
    assert native_build.build_native(native_programs.SOURCE) == built
    assert built.stat().st_mtime_ns == stamp  # served from the cache
    changed = tmp_path / "programs.c"
    changed.write_text(native_programs.SOURCE.read_text() + "\nint unused_symbol;\n")
    monkeypatch.setenv("CC", "false")
    with pytest.raises(OSError, match="false failed"):
        native_build.build_native(changed)
    assert sorted(p.name for p in built.parent.iterdir()) == [built.name]  # nothing half-written


def test_a_worker_whose_thread_never_starts_its_program_is_named_within_the_timeout(chain):
    """cpu@1's thread is busy with another job when the run starts: the run fails within
    the timeout naming cpu@1, and once the thread is free the next run works."""
    with Executor(chain, timeout_s=0.5) as executor:
        busy = threading.Event()
        executor.workers[1].submit(lambda: busy.wait(3))
        start = time.perf_counter()
        with pytest.raises(RunError, match="cpu@1 did not finish its program") as err:
            executor.run({"x": np.zeros((8,), "float32")})
        assert time.perf_counter() - start < 1.8
        assert err.value.device == "cpu@1"
        busy.set()
        time.sleep(0.2)
        np.testing.assert_array_equal(executor.run({"x": np.zeros(8, "float32")})[0], np.full(8, 8))
