import dataclasses
import os
import signal

import pytest
from conftest import free_port, start_server, wait_accepting

from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.runtime.timer import RPCRunner
from tvm_hetero.zoo import load_zoo_model

FAST = MeasureConfig(repeat=3, min_repeat_ms=1)


@pytest.fixture
def worker(start_workers):
    return start_workers()[0][0]


@pytest.fixture
def plain_server():
    port = free_port()
    proc = start_server(
        [
            "-m",
            "tvm.exec.rpc_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--port-end",
            str(port + 1),
        ],
        "bind to",
    )
    wait_accepting(port)
    yield port
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_profile_through_a_real_rpc_worker(tmp_path, worker, two_cpus):
    model = load_zoo_model("mlp:tiny")
    runner = RPCRunner("127.0.0.1", worker)
    fp = runner.fingerprint(two_cpus[0])
    assert fp.host == f"127.0.0.1:{worker}" and fp.kind == "cpu" and "unknown" not in fp.name
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), runner=runner, config=FAST)
    record = profiler.profile_op(model.mod, "matmul", two_cpus[0])
    assert record.fingerprint["host"] == f"127.0.0.1:{worker}" and record.median_s > 0
    # multi-device executables go through set_input / invoke_stateful over RPC
    copies = profiler.profile_transfer(two_cpus[0], two_cpus[1], [4096])
    assert copies[0].median_s > 0


def test_a_profiler_timing_here_times_a_remote_device_on_its_worker(
    tmp_path, worker, two_cpus, monkeypatch
):  # fmt: skip
    """A device with a host is timed on its worker, the library sent over the data port; before,
    it was timed in this process under the worker's name (a device of a third of a core
    measured at a whole one)."""
    from tvm_hetero.runtime import uploads

    sent, real = [], uploads.upload
    monkeypatch.setattr(uploads, "upload", lambda *a: sent.append(a) or real(*a))
    remote = dataclasses.replace(two_cpus[0], name="edge", host=f"127.0.0.1:{worker}")
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=FAST)  # its runner: this process
    record = profiler.profile_op(load_zoo_model("mlp:tiny").mod, "matmul", remote)
    assert record.fingerprint["host"] == f"127.0.0.1:{worker}" and record.median_s > 0
    assert len(sent) == 1 and sent[0][1] != worker  # the data port, not the RPC port
    local = profiler.profile_op(load_zoo_model("mlp:tiny").mod, "matmul", two_cpus[0])
    assert local.fingerprint["host"] == "local" and len(sent) == 1
    again = profiler.profile_op(load_zoo_model("mlp:tiny").mod, "matmul", remote)
    assert again == record and profiler.hits == 1  # served from the database, by its worker's key


def test_a_worker_is_free_again_as_soon_as_a_measurement_on_it_ends(tmp_path, worker, two_cpus):
    """Each measurement's session ends with it: left to the garbage collector, one lived on to
    its timeout and the next measurement on that worker waited 59 s to connect."""
    from tvm_hetero.ir.opgraph import OpGraph
    from tvm_hetero.runtime.remote_worker import connect_worker
    from tvm_hetero.strategies.duet.planner import duet_graph

    model = load_zoo_model("mt-dnn:tiny")
    remote = dataclasses.replace(two_cpus[0], name="edge", host=f"127.0.0.1:{worker}")
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), config=FAST)
    for nodes in duet_graph(OpGraph.from_module(model.mod)).subgraphs[:4]:
        assert profiler.profile_subgraph(model.mod, nodes, remote).median_s > 0
        session, _ = connect_worker(remote, timeout_s=5.0)  # RunError "no free worker" if held
        del session


def test_closed_runners_free_their_workers_at_once(tmp_path, worker, two_cpus):
    """What FlexPie's and EdgePipe's measurements on a cluster's workers end with: every
    session of their runners ends at once, though a profiler still holds the runner (dropped
    instead, the worker stays held until the session's timeout)."""
    from tvm_hetero.runtime.remote_worker import connect_worker
    from tvm_hetero.runtime.timer import close_runners, runners_for

    remote = dataclasses.replace(two_cpus[0], name="edge", host=f"127.0.0.1:{worker}")
    runners = runners_for([remote, dataclasses.replace(remote, name="edge-too")])
    profiler = Profiler(ProfileDB(tmp_path / "p.jsonl"), runners["edge"], FAST)
    assert profiler.profile_op(load_zoo_model("mlp:tiny").mod, "matmul", remote).median_s > 0
    close_runners(runners)
    session, _ = connect_worker(remote, timeout_s=5.0)  # RunError "no free worker" if held
    del session


def test_plain_tvm_rpc_server_works_without_our_functions(tmp_path, plain_server, two_cpus):
    runner = RPCRunner("127.0.0.1", plain_server)
    assert runner.fingerprint(two_cpus[0]).name == "unknown cpu"
    record = Profiler(ProfileDB(tmp_path / "p.jsonl"), runner=runner, config=FAST).profile_op(
        load_zoo_model("mlp:tiny").mod, "relu", two_cpus[0]
    )
    assert record.median_s > 0


def test_unreachable_server_is_reported_not_hung():
    with pytest.raises(ConnectionError, match=r"cannot reach the TVM RPC server at 127\.0\.0\.1:"):
        RPCRunner("127.0.0.1", free_port(), timeout_s=5)
