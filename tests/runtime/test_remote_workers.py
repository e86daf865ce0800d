"""Remote workers: real ``tvm-hetero worker`` processes (TVM runtime library only) on loopback."""

import dataclasses
import json
import os
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tvm
from conftest import free_port, remote_cpus, start_server, stop_group, wait_accepting

from tvm_hetero import api
from tvm_hetero.cli.main import main
from tvm_hetero.devices import cpu_device
from tvm_hetero.errors import RunError
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan import Placement
from tvm_hetero.runtime import remote_worker
from tvm_hetero.runtime.deployment import read_manifest
from tvm_hetero.runtime.executor import Executor, interleaved_run_seconds
from tvm_hetero.runtime.remote_worker import RemoteValue, RemoteWorker
from tvm_hetero.strategies.duet import planner as duet_planner
from tvm_hetero.zoo import load_zoo_model


def _edge(name: str, port: int):
    return dataclasses.replace(cpu_device(0), name=name, host=f"127.0.0.1:{port}", threads=1)


def _inputs(deployment):
    rng = np.random.default_rng(0)
    return [spec.random(rng) for spec in deployment.inputs]


def _reference(model, inputs):
    with Executor(api.compile(model, [cpu_device(0)]).deployment) as ex:
        return ex.run(inputs)


def test_three_workers_run_a_partitioned_model_and_match(start_workers, monkeypatch):
    edges = [_edge(f"edge-{c}", port) for c, (port, _) in zip("abc", start_workers(3), strict=True)]
    model = load_zoo_model("bert-small:tiny")
    placement = api.placement_from_rules(model, edges, {"matmul": "edge-b", "nn.softmax": "edge-c"})
    deployment = api.compile(model, edges, placement).deployment
    assert {s.device for s in deployment.units} == {0, 1, 2}
    inputs = _inputs(deployment)
    downloads, uploads = [], []
    real_download, real_move = RemoteWorker.download, RemoteWorker.move

    def download(self, value):
        downloads.append(value.name)
        return real_download(self, value)

    pulls, pushes, real_call = [], [], RemoteWorker.call

    def move(self, value):
        (pulls if hasattr(value, "worker") else uploads).append(self.name)
        return real_move(self, value)

    def call(self, function, args, pushed=()):
        pushes.extend(v.worker.name for _, v in pushed)
        return real_call(self, function, args, pushed)

    calls, real_rpc = [], RemoteWorker._rpc

    def rpc(self, what, fn):
        calls.append(what)
        return real_rpc(self, what, fn)

    monkeypatch.setattr(RemoteWorker, "download", download)
    monkeypatch.setattr(RemoteWorker, "move", move)
    monkeypatch.setattr(RemoteWorker, "call", call)
    monkeypatch.setattr(RemoteWorker, "_rpc", rpc)
    other = [x * 0.5 + 1 if x.dtype.kind == "f" else x for x in inputs]
    with Executor(deployment, programs=False) as ex:  # by dataflow: the client calls each unit
        got = ex.run(inputs)
        timeline = ex.timeline
        first_run = (list(downloads), list(uploads))
        how = (len(pulls), len(pushes), sum(ex._pull))  # the first run's; copies between workers
        again = ex.run(other)  # pulled values are received into the last run's tensors
        values = ex.run_tensors(ex.place_inputs(inputs))
        held = next(v for v in values.values() if isinstance(v, RemoteValue))
        there = next(w for w in ex.workers.values() if w is not held.worker)
        with ThreadPoolExecutor(1) as pool, there._lock:  # as while a unit runs there
            pulled = pool.submit(there.move, held).result(timeout=5)  # commanded, not queued
            sent = pool.submit(there.move, np.arange(6.0)).result(timeout=5)  # an input too
        np.testing.assert_array_equal(there.download(pulled), held.worker.download(held))
        np.testing.assert_array_equal(there.download(sent), np.arange(6.0))
        # a unit called before its input arrives waits for it there, and says how long
        step = next(s for s in deployment.units if ex.workers[s.device] is there)
        args = [values[v] for v in step.inputs]
        first = args[0].download() if isinstance(args[0], RemoteValue) else args[0].numpy()
        late = RemoteValue(there, there._fresh("m"), -1)
        with ThreadPoolExecutor(1) as pool:
            called = pool.submit(there.call, step.function, [late, *args[1:]])
            time.sleep(0.5)
            there._tell({"put": late.name}, "an input", first)
            assert called.result(timeout=30).waited_s >= 0.45
        assert all(e.waited_s < 0.45 for e in timeline.events)
    downloads, uploads = first_run
    # a unit's tuple items are held by name on the worker: no call takes them
    assert any(s.kind == "item" for s in deployment.steps)
    assert "unit" in " ".join(calls) and not any(c.startswith("item") for c in calls)
    want = _reference(model, inputs)
    for g, w in zip(again, _reference(model, other), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # the client sends the inputs and receives the outputs; the rest goes worker to worker
    assert len(downloads) == len(want)
    assert uploads and set(uploads) <= {e.name for e in edges}
    assert len(uploads) <= len(deployment.inputs) * len(edges)
    moved = [e for e in timeline.events if e.kind == "copy"]
    assert len(moved) == len(deployment.copies) > len(uploads)
    # a unit's worker pushes what other workers read of its result as the unit ends; nothing
    # that a unit made is pulled (a pull waited for the client to hear that the unit ended)
    # (two items read across workers by a unit, with no copy step, are still pulled)
    kind = {s.name: s.kind for s in deployment.steps}
    of_units = [c for c in deployment.copies if kind.get(c.inputs[0]) in ("unit", "item")]
    assert any(kind[c.inputs[0]] == "item" for c in of_units)  # a tuple's item, pushed too
    assert how[1] == how[2] == len(of_units) > how[0]
    assert {e.worker for e in timeline.events} == {e.name for e in edges}


def test_by_programs_each_worker_gets_one_call_a_run_and_the_client_moves_only_ends(
    start_workers, monkeypatch
):
    """The same three workers by programs: each is sent its program once and then one message
    a run on its data port (for any number of microbatches, the client's inputs it reads
    ahead of it on the same connection; no TVM RPC in a run); the client sends the inputs (each once a worker that
    reads it) and takes the outputs; every other tensor goes worker to worker. Outputs equal
    the single-device build, microbatch by microbatch."""
    edges = [_edge(f"edge-{c}", port) for c, (port, _) in zip("abc", start_workers(3), strict=True)]
    model = load_zoo_model("bert-small:tiny")
    placement = api.placement_from_rules(model, edges, {"matmul": "edge-b", "nn.softmax": "edge-c"})
    deployment = api.compile(model, edges, placement).deployment
    calls, rpcs, puts, downloads = [], [], [], []
    real_rpc, real_put, real_download = RemoteWorker._rpc, RemoteWorker.put, RemoteWorker.download
    real_start = RemoteWorker.start_program
    monkeypatch.setattr(
        RemoteWorker, "_rpc", lambda self, what, fn: (rpcs.append((self.name, what)),
                                                      real_rpc(self, what, fn))[1]
    )  # fmt: skip

    def start_program(self, run, microbatches, wait_s, returns=(), inputs=(), send_s=None):
        calls.append((self.name, "program"))
        puts.extend(name for name, _ in inputs)
        return real_start(self, run, microbatches, wait_s, returns, inputs, send_s)

    monkeypatch.setattr(RemoteWorker, "start_program", start_program)
    monkeypatch.setattr(
        RemoteWorker, "put", lambda self, name, v: (puts.append(name), real_put(self, name, v))[1]
    )
    monkeypatch.setattr(
        RemoteWorker, "download",
        lambda self, value: (downloads.append(value.name), real_download(self, value))[1],
    )  # fmt: skip
    first, second = _inputs(deployment), [x * 0 + 1 for x in _inputs(deployment)]
    with Executor(deployment) as ex:
        assert ex.programs is not None
        loaded = list(rpcs)
        rpcs.clear()
        got = ex.run(first)
        one_run, sent = list(calls), list(puts)
        batches = [ex.place_inputs(first), ex.place_inputs(second)]
        calls.clear()
        both = ex.run_many(batches)
        assert sorted(calls) == sorted((e.name, "program") for e in edges)
        assert rpcs == []
        outputs = [ex.outputs_of(values) for values in both]
        assert callable(ex._timeline)  # the workers' rows are made into events when read
        units = [e for e in ex.timeline.events if e.kind == "unit"]
        assert len(units) == 2 * len(deployment.units)
        assert all(e.start_s <= e.end_s <= ex.timeline.total_s for e in units)
    assert sorted(w for w, what in loaded if what == "program load") == [e.name for e in edges]
    assert sorted(one_run) == sorted((e.name, "program") for e in edges)
    readers = {s.device for s in deployment.steps if "ids" in s.inputs}
    assert len(sent) == len(deployment.inputs) * len(readers)
    assert downloads == []  # the outputs came back with the program's answer
    assert {e.worker for e in units} == {e.name for e in edges}
    assert sorted({e.microbatch for e in units}) == [0, 1]
    for g, w in zip(got, _reference(model, first), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for k, x in enumerate((first, second)):
        for g, w in zip(outputs[k], _reference(model, x), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _two_heads() -> tvm.IRModule:
    """A trunk and two heads whose results the model returns as a tuple (MT-DNN's shape)."""
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class TwoHeads:
        @R.function
        def main(x: R.Tensor((4, 8), "float32")):
            with R.dataflow():
                a = R.nn.relu(x)
                b = R.exp(R.multiply(a, a))
                c = R.sigmoid(R.add(a, a))
                gv = (b, c)
                R.output(gv)
            return gv

    return TwoHeads


@pytest.mark.parametrize("programs", [True, False])
def test_heads_on_two_workers_return_their_tuple(start_workers, programs):
    """A DUET plan with the heads on different workers: the output copies home read the tuple
    the heads' results were gathered in item by item, and no worker is asked to send it whole
    (it failed with "'Array' object has no attribute '__dlpack__'" on MT-DNN's workers)."""
    edges = remote_cpus(start_workers(2))
    model = load_model(_two_heads(), name="two-heads")
    dg = duet_planner.duet_graph(OpGraph.from_module(model.mod))
    assert len(dg.subgraphs) == 3
    plan = duet_planner.to_plan(dg, edges, (0, 0, 1), "test")
    deployment = api.compile(model, api.in_plan_order(edges, plan), plan).deployment
    assert {s.device for s in deployment.units} == {0, 1}
    x = _inputs(deployment)
    with Executor(deployment, programs=programs) as ex:
        assert (ex.programs is not None) == programs
        got = ex.run(x)
    for g, w in zip(got, _reference(model, x), strict=True):
        np.testing.assert_array_equal(g, w)


def test_a_tuple_output_of_one_worker_is_taken_item_by_item_run_after_run(start_workers):
    """A model that returns a tuple, whole on one remote worker: by programs, the client took
    its items under names of run 0 while the worker was in the program's run 1, which it
    dropped as late ("no value '0/i1' here": MT-DNN on one worker of the ring)."""
    edges = remote_cpus(start_workers(1))
    model = load_model(_two_heads(), name="two-heads")
    deployment = api.compile(model, edges).deployment
    first = _inputs(deployment)
    second = [2 * a for a in first]
    for programs in (True, False):
        with Executor(deployment, programs=programs) as ex:
            got = [ex.run(first), ex.run(second)]
        for x, outputs in zip((first, second), got, strict=True):
            for g, w in zip(outputs, _reference(model, x), strict=True):
                np.testing.assert_array_equal(g, w)


def test_an_output_that_does_not_come_back_with_the_answer_is_downloaded(
    start_workers, monkeypatch
):
    """A tensor past ``RETURN_BYTES`` stays on its worker (a RemoteValue), and the client
    downloads it through the data port: here every one, the answer's tensors dropped; a timed
    run downloads it too (a run ends when the caller has its outputs)."""
    edges = [_edge(f"edge-{c}", port) for c, (port, _) in zip("ab", start_workers(2), strict=True)]
    model = load_zoo_model("mlp:tiny")
    placement = api.placement_from_rules(model, edges, {"matmul": "edge-b"})
    deployment = api.compile(model, edges, placement).deployment
    real_answer, downloads, real_download = RemoteWorker.program_answer, [], RemoteWorker.download

    def none_back(self, *args, **kwargs):
        return real_answer(self, *args, **kwargs)._replace(tensors={})

    monkeypatch.setattr(RemoteWorker, "program_answer", none_back)
    monkeypatch.setattr(
        RemoteWorker, "download",
        lambda self, value: (downloads.append(value.name), real_download(self, value))[1],
    )  # fmt: skip
    inputs = _inputs(deployment)
    with Executor(deployment) as ex:
        assert ex.programs is not None
        got = ex.run(inputs)
        assert len(downloads) == len(deployment.outputs)
        ex.time(inputs, repeat=3, warmup=1)
    assert len(downloads) == 5 * len(deployment.outputs)
    for g, w in zip(got, _reference(model, inputs), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("native", [True, False])
def test_an_output_copied_home_from_another_remote_worker_comes_back_with_its_answer(
    start_workers, monkeypatch, native
):
    """The last unit on edge-b, the output copied home onto edge-a: the copy is not made
    (``Programs.forwarded``), edge-b answers with the output itself; nothing is downloaded
    after the run and edge-a is sent nothing of it. Outputs equal the single-device build."""
    edges = [_edge(f"edge-{c}", port) for c, (port, _) in zip("ab", start_workers(2), strict=True)]
    model = load_zoo_model("mlp:tiny")
    placement = api.placement_from_rules(model, edges, {"matmul": "edge-b", "add": "edge-b"})
    deployment = api.compile(model, edges, placement).deployment
    kind = {s.name: (s.kind, s.device) for s in deployment.steps}
    home = [s for s in deployment.steps if s.kind == "copy" and s.name in deployment.outputs]
    assert home and all(kind[s.inputs[0]] == ("unit", 1) and s.device == 0 for s in home)
    downloads, real_download = [], RemoteWorker.download
    monkeypatch.setattr(
        RemoteWorker, "download",
        lambda self, value: (downloads.append(value.name), real_download(self, value))[1],
    )  # fmt: skip
    inputs = _inputs(deployment)
    with Executor(deployment, native=native) as ex:
        forwarded = {deployment.steps[i].name for i in ex.programs.forwarded}
        assert forwarded == {s.name for s in home}
        assert not any(n in forwarded for sends in ex.programs.sends for _, n in sends)
        got = [ex.run(inputs), ex.run([2 * x for x in inputs])]
    assert downloads == []
    for k, x in enumerate((inputs, [2 * x for x in inputs])):
        for g, w in zip(got[k], _reference(model, x), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _units_with(start_workers, monkeypatch, method: str, wrap, native: bool = True):
    """The unit events of one run of ``mlp:tiny`` over edge-a and edge-b (its matmul on edge-b)
    with ``RemoteWorker.<method>`` replaced by ``wrap(real method)``, and the run's total."""
    edges = [_edge(f"edge-{c}", port) for c, (port, _) in zip("ab", start_workers(2), strict=True)]
    model = load_zoo_model("mlp:tiny")
    placement = api.placement_from_rules(model, edges, {"matmul": "edge-b"})
    deployment = api.compile(model, edges, placement).deployment
    monkeypatch.setattr(RemoteWorker, method, wrap(getattr(RemoteWorker, method)))
    with Executor(deployment, native=native) as ex:
        ex.run(_inputs(deployment))
        timeline = ex.timeline
    units = [e for e in timeline.events if e.kind == "unit"]
    assert {e.worker for e in units} == {"edge-a", "edge-b"}
    return units, timeline.total_s


@pytest.mark.parametrize("native", [True, False])
def test_a_remote_workers_steps_are_placed_from_when_its_program_started(
    start_workers, monkeypatch, native
):
    """edge-b is asked for its program 60 ms late (the client's thread held up between asking
    edge-a and edge-b): its steps are placed from when its program started on its clock, which
    this machine's workers share, not from when the client began asking (60 ms earlier)."""
    late_s = 0.06

    def late(real):
        def start_program(self, *args, **kwargs):
            if self.name == "edge-b":
                time.sleep(late_s)
            return real(self, *args, **kwargs)

        return start_program

    units, total_s = _units_with(start_workers, monkeypatch, "start_program", late, native)
    on_b = [e for e in units if e.worker == "edge-b"]
    assert on_b and all(e.start_s >= late_s for e in on_b), [(e.step, e.start_s) for e in on_b]
    assert all(e.end_s <= total_s for e in units)


def test_a_remote_worker_on_another_clock_has_its_steps_placed_from_the_ask(
    start_workers, monkeypatch
):
    """A worker whose clock is not this machine's (its program's start told a thousand seconds
    off): its steps are placed from when the client asked, inside the run."""

    def elsewhere(real):
        def program_answer(self, *args, **kwargs):
            answer = real(self, *args, **kwargs)
            return answer._replace(started=answer.started + 1000.0)

        return program_answer

    units, total_s = _units_with(start_workers, monkeypatch, "program_answer", elsewhere)
    assert all(0 <= e.start_s <= e.end_s <= total_s for e in units)


def test_a_program_answer_brings_its_tensors_back_whole():
    from tvm_hetero.runtime.rpc_worker import program_answer, read_program_answer

    rng = np.random.default_rng(0)
    arrays = {(0, "a"): rng.standard_normal((3, 4)).astype("float32"),
              (1, "a"): np.array(7, "int64"), (1, "b"): np.zeros((0, 2), "float16"),
              (0, "c"): rng.random(5) > 0.5}  # fmt: skip
    events = [[0, 0, 0.5, 1.0, 0.0, -1]]
    back = [[k, n, list(a.shape), str(a.dtype)] for (k, n), a in arrays.items()]
    got_events, got, started = read_program_answer(
        program_answer(events, back, [a.tobytes() for a in arrays.values()], 1234.5)
    )
    assert got_events.tolist() == events and set(got) == set(arrays) and started == 1234.5
    for key, array in arrays.items():
        assert got[key].dtype == array.dtype and got[key].shape == array.shape
        np.testing.assert_array_equal(got[key], array)
        assert got[key].flags.writeable


def test_a_status_answer_is_the_program_answer_or_what_the_worker_said():
    from tvm_hetero.runtime.rpc_worker import (
        WorkerSaid,
        program_answer,
        read_status_answer,
    )

    events, array = [[0, 0, 0.0, 1.0, 0.0, -1]], np.arange(3, dtype="float32")
    body = program_answer(events, [[0, "y", [3], "float32"]], [array.tobytes()])
    got_events, got, started = read_status_answer(b"\0" + body)
    assert got_events.tolist() == events and np.isnan(started)  # no start said
    np.testing.assert_array_equal(got[0, "y"], array)
    with pytest.raises(WorkerSaid, match=r"^LinkError from e1: late$"):
        read_status_answer(b"\1LinkError from e1: late")


def test_an_unreachable_worker_is_named():
    edge = _edge("edge-a", free_port())
    model = load_zoo_model("mlp:tiny")
    deployment = api.compile(model, [edge]).deployment
    with pytest.raises(RunError, match=r"cannot reach worker edge-a \(127\.0\.0\.1:\d+\)"):
        Executor(deployment)


def test_a_dead_or_silent_worker_fails_the_run_naming_it_within_the_timeout(start_workers):
    (pa, _), (pb, proc_b), (pc, proc_c) = start_workers(3)
    model = load_zoo_model("mlp:tiny")
    runs = []
    for name, port in (("edge-b", pb), ("edge-c", pc)):
        edges = [_edge("edge-a", pa), _edge(name, port)]
        deployment = api.compile(model, edges, Placement(("edge-a", name), {"matmul": 1}))
        runs.append((deployment.deployment, _inputs(deployment.deployment)))
    (dep_b, in_b), (dep_c, in_c) = runs
    with Executor(dep_b, timeout_s=2) as ex:
        ex.run(in_b)
        stop_group(proc_b)  # alive, silent
        start = time.perf_counter()
        # edge-a waits for what edge-b sends it, and says so first; edge-b is blamed
        with pytest.raises(RunError, match=r"from edge-b: .* did not arrive within 2 s") as err:
            ex.run(in_b)
        assert time.perf_counter() - start < 5
        assert err.value.device == "edge-b"
    with Executor(dep_c, timeout_s=5) as ex:
        ex.run(in_c)
        os.killpg(proc_c.pid, signal.SIGKILL)  # the server and its session process
        start = time.perf_counter()
        with pytest.raises(RunError, match=r"edge-c \(127\.0\.0\.1:\d+\)"):
            ex.run(in_c)
        assert time.perf_counter() - start < 5


def test_a_worker_left_in_a_call_serves_the_next_session_once_the_call_returns(start_workers):
    """A run given up on while the worker computes (stopped here: a slow device's long unit)
    ends its session when the call returns, not at the end of the client process."""
    ((port, proc),) = start_workers(1)
    edge = _edge("edge-a", port)
    deployment = api.compile(load_zoo_model("mlp:tiny"), [edge]).deployment
    inputs = _inputs(deployment)
    with Executor(deployment, timeout_s=2) as ex:
        ex.run(inputs)
        stop_group(proc)
        with pytest.raises(RunError, match="edge-a"):
            ex.run(inputs)
    os.killpg(proc.pid, signal.SIGCONT)  # the call returns: the session may end
    session, _ = remote_worker.connect_worker(edge, timeout_s=30.0)
    assert session.cpu(0).exist


def test_a_worker_serving_another_session_is_named_within_the_timeout(start_workers):
    """A worker, like TVM's RPC server, serves one session at a time: a second one waits."""
    ((port, _),) = start_workers(1)
    edge = _edge("edge-a", port)
    session, _ = remote_worker.connect_worker(edge)
    start = time.perf_counter()
    with pytest.raises(RunError, match=r"no free worker for edge-a \(127\.0\.0\.1:\d+\) "
                       r"within 1 s \(a worker serves one session at a time"):  # fmt: skip
        remote_worker.connect_worker(edge, timeout_s=1.0)
    assert time.perf_counter() - start < 4
    del session  # closed: the worker serves the next session
    again, _ = remote_worker.connect_worker(edge, timeout_s=10.0)
    assert again.cpu(0).exist


def test_deployments_on_one_worker_are_timed_in_interleaved_rounds(start_workers, monkeypatch):
    (port, _), (other_port, _) = start_workers(2)
    model = load_zoo_model("mlp:tiny")
    edge = _edge("edge-a", port)
    one, two = (api.compile(model, [edge]).deployment for _ in range(2))
    apart = api.compile(model, [_edge("edge-b", other_port)]).deployment
    sessions, real_init = [], RemoteWorker.__init__

    def init(self, spec, *args, **kwargs):
        real_init(self, spec, *args, **kwargs)
        sessions.append((spec.name, self.sent_library))

    monkeypatch.setattr(RemoteWorker, "__init__", init)
    found = interleaved_run_seconds([one, two, apart], [3, 2, 2], rounds=2, warmup=1)
    assert [len(s) for s in found] == [3, 2, 2] and all(t > 0 for s in found for t in s)
    # one and two take turns on edge-a, a new session each turn, and the worker keeps each
    # library from the first; apart has edge-b to itself: opened once
    assert [name for name, _ in sessions] == ["edge-a", "edge-a", "edge-b", "edge-a", "edge-a"]
    assert sessions[0][1] is True and [sent for _, sent in sessions[3:]] == [False, False]


def test_command_line_compile_check_and_run_on_workers_of_a_cluster_file(
    start_workers, tmp_path, capsys, monkeypatch
):
    (pa, _), (pb, worker_b) = start_workers(2)
    scratch = tmp_path / "scratch"  # where run extracts its libraries: emptied after each run
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    target = cpu_device(0).target

    def cluster(path, a, b):
        edges = [{"name": n, "kind": "cpu", "target": target, "threads": 1,
                  "host": f"127.0.0.1:{p}"} for n, p in (("edge-a", a), ("edge-b", b))]  # fmt: skip
        path.write_text(json.dumps({"devices": edges, "topology": "mesh"}))
        return str(path)

    here, swapped = cluster(tmp_path / "c.json", pa, pb), cluster(tmp_path / "s.json", pb, pa)
    art, out = str(tmp_path / "m.tar"), tmp_path / "o.npz"
    args = ["compile", "mlp:tiny", "--cluster", here, "--device", "edge-a", "--device", "edge-b",
            "--place", "matmul=edge-b", "--check", "-o", art]  # fmt: skip
    assert main(args) == 0, capsys.readouterr()
    assert main(["run", art, "--outputs", str(out)]) == 0, capsys.readouterr()
    first = np.load(out)["output_0"]
    assert main(["run", art, "--cluster", swapped, "--outputs", str(out)]) == 0
    np.testing.assert_array_equal(np.load(out)["output_0"], first)
    printed = capsys.readouterr().out
    assert "on edge-a, edge-b (4 units, 4 copies)" in printed
    # the worker of edge-b dies: the run names it; --replan compiles and runs without it
    os.killpg(worker_b.pid, signal.SIGKILL)
    worker_b.wait()
    assert main(["run", art, "--timeout", "5"]) == 3  # a worker failed: exit 3
    assert "edge-b" in " ".join(capsys.readouterr().out.split())
    assert main(["run", art, "--replan", "--timeout", "5", "--outputs", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "re-planning without edge-b:" in printed and "--exclude edge-b" in printed
    assert "ran mlp:tiny on edge-a (" in printed
    np.testing.assert_allclose(np.load(out)["output_0"], first, rtol=1e-5, atol=1e-6)
    assert not any(scratch.iterdir())  # the failed run's and the re-planned run's included
    # compile --exclude: the same by hand, every other device of the cluster file kept
    assert main(["compile", "mlp:tiny", "--cluster", here, "--exclude", "edge-b", "-o", art]) == 0
    manifest = read_manifest(art)
    assert [d["name"] for d in manifest["devices"]] == ["edge-a"]
    assert manifest["recipe"]["argv"][-3:] == ["edge-b", "-o", "m.tar"]  # relative to the .tar


@pytest.fixture
def tracker():
    port = free_port()
    args = ["-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
            "--port-end", str(port + 1)]  # fmt: skip
    proc = start_server(args, "bind to")
    wait_accepting(port)
    yield f"127.0.0.1:{port}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_workers_of_a_tracker_are_requested_by_key(start_workers, tracker):
    start_workers(2, ("--tracker", tracker, "--key", "edge"))
    edges = [dataclasses.replace(_edge(n, 1), host=tracker, key="edge") for n in ("a", "b")]
    assert not edges[0].colocated(edges[1])  # one tracker, two workers
    model = load_zoo_model("mlp:tiny")
    placement = api.placement_from_rules(model, edges, {"matmul": "b"})
    deployment = api.compile(model, edges, placement).deployment
    assert deployment.copies  # a copy between two workers moves bytes
    inputs = _inputs(deployment)
    with Executor(deployment) as ex:
        got = ex.run(inputs)
        where = {w.where for w in ex.workers.values()}
    for g, w in zip(got, _reference(model, inputs), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert len(where) == 2 and all("127.0.0.1:" in w for w in where)
    nobody = dataclasses.replace(edges[0], key="gpu-box")
    start = time.perf_counter()
    with pytest.raises(RunError, match=r"no free worker for a \(127.*key gpu-box\) within 1 s"):
        RemoteWorker(nobody, deployment.libraries[0], timeout_s=1)
    assert time.perf_counter() - start < 5


def test_a_worker_of_another_protocol_is_refused_naming_it(start_workers, monkeypatch):
    """An older worker would not answer a run on its data port: refused at connect."""
    ((port, _),) = start_workers(1)
    edge = _edge("edge-a", port)
    deployment = api.compile(load_zoo_model("mlp:tiny"), [edge]).deployment
    monkeypatch.setattr(remote_worker, "PROTOCOL", remote_worker.PROTOCOL + 1)
    with pytest.raises(RunError, match=r"worker edge-a \(127\.0\.0\.1:\d+\) speaks protocol "):
        Executor(deployment)
    monkeypatch.undo()
    with Executor(deployment) as ex:  # the worker serves the next session
        ex.run(_inputs(deployment))


def test_the_caller_asks_remote_workers_itself_and_spins_only_for_one_with_short_runs(
    start_workers, monkeypatch
):
    """Where every worker is remote, the caller's thread sends each its run and takes each
    answer (no client thread: a run after a failure goes by them, test_worker_faults.py); it
    spins for an answer only from a worker alone whose last answer came within the spin."""
    import threading

    from tvm_hetero.runtime import program_runner

    asked, spins = [], []
    real_start, real_answer = RemoteWorker.start_program, RemoteWorker.program_answer

    def start_program(self, *args, **kwargs):
        asked.append((self.name, threading.current_thread() is threading.main_thread()))
        return real_start(self, *args, **kwargs)

    def program_answer(self, question, answer_s=None, spin_s=0.0):
        spins.append((self.name, spin_s))
        return real_answer(self, question, answer_s, spin_s)

    monkeypatch.setattr(RemoteWorker, "start_program", start_program)
    monkeypatch.setattr(RemoteWorker, "program_answer", program_answer)
    monkeypatch.setattr(program_runner, "ANSWER_SPIN_S", 60.0)  # every answer here is short
    edges = remote_cpus(start_workers(2))
    model = load_zoo_model("mlp:tiny")
    alone = api.compile(model, [edges[0]]).deployment
    x = _inputs(alone)
    with Executor(alone, timeout_s=30) as ex:
        got = [ex.run(x) for _ in range(3)]
    assert spins == [("edge-0", 0.0), ("edge-0", 60.0), ("edge-0", 60.0)]
    for g in got[1:]:
        np.testing.assert_array_equal(g[0], got[0][0])
    spins.clear()
    asked.clear()
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    split = Placement(("edge-0", "edge-1"), {ids[-1]: 1})
    with Executor(api.compile(model, edges, split).deployment, timeout_s=30) as ex:
        for _ in range(3):
            np.testing.assert_allclose(ex.run(x)[0], got[0][0], rtol=1e-5, atol=1e-6)
    assert sorted(asked) == sorted([("edge-0", True), ("edge-1", True)] * 3)
    assert len(spins) == 6 and {s for _, s in spins} == {0.0}  # two workers: no spin


def test_after_a_failed_run_the_answers_owed_are_taken_and_the_next_runs_work(start_workers):
    """A run failed by a stopped worker: the other's answer fails it, the stopped one's is
    still owed (taken on its client thread once it comes, runs going by the client threads
    meanwhile), and once the worker goes on the next runs give the same outputs."""
    (pa, _), (pb, proc_b) = start_workers(2)
    model = load_zoo_model("mlp:tiny")
    edges = [_edge("edge-a", pa), _edge("edge-b", pb)]
    deployment = api.compile(model, edges, Placement(("edge-a", "edge-b"), {"matmul": 1}))
    x = _inputs(deployment.deployment)
    with Executor(deployment.deployment, timeout_s=4) as ex:  # owed 2 s past the failure
        want = ex.run(x)
        stop_group(proc_b)
        with pytest.raises(RunError) as err:
            ex.run(x)
        assert err.value.device == "edge-b"
        assert ex._runner._draining == {1}  # edge-b's answer, owed
        os.killpg(proc_b.pid, signal.SIGCONT)
        for _ in range(3):
            np.testing.assert_array_equal(ex.run(x)[0], want[0])
        deadline = time.perf_counter() + 10
        while ex._runner._draining and time.perf_counter() < deadline:
            time.sleep(0.05)
        assert not ex._runner._draining
        np.testing.assert_array_equal(ex.run(x)[0], want[0])
