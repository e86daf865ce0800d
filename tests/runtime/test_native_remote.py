"""A remote worker's program run natively (runtime/native_remote.py, native/remote_programs.c).

In this process: a stand-in for the worker's session (its values, holds and units, the units
Python functions), real program links on loopback, and the wire format written here from its
description (``program_links.HEAD``), not by the code under test. Real worker processes:
``test_remote_workers.py`` (every remote run there is native) and the end of this file.
"""

import dataclasses
import json
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from conftest import remote_cpus

from tvm_hetero import api
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.ir.workloads import chain_module
from tvm_hetero.plan import Placement
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.native_remote import NativeProgram, unavailable
from tvm_hetero.runtime.program_links import HEAD, LINK, Inlinks, Outlinks
from tvm_hetero.runtime.tensor_link import recv_frame

pytestmark = pytest.mark.skipif(unavailable() is not None, reason="no C compiler")


def _frame(name: str, array: np.ndarray) -> bytes:
    """One value on a program link, as program_links' docstring lays it out."""
    kind, label = str(array.dtype).encode(), name.encode()
    shape = struct.pack(f"<{array.ndim}q", *array.shape)
    return HEAD.pack(array.nbytes, len(label), array.ndim, len(kind)) + label + shape + kind + \
        array.tobytes()  # fmt: skip


class Session:
    """What a native program asks of ``rpc_worker._Session``: values by name, holds, units."""

    gpu = False
    name = "edge-a"

    def __init__(self, units: dict) -> None:
        self.functions = {name: tvm_ffi.convert(f) for name, f in units.items()}
        self.values: dict[str, np.ndarray] = {}
        self.held: dict[str, np.ndarray] = {}
        self.delivered: list[tuple[str, np.ndarray, list]] = []

    def value(self, name: str, timeout_s: float, maker: str | None):
        if name not in self.values:
            raise TimeoutError(f"value {name!r} did not arrive in {timeout_s:g} s")
        return tvm.runtime.tensor(self.values[name])

    def hold(self, name: str, value) -> None:
        self.held[name] = value.numpy().copy()

    def _view(self, value):
        return value.numpy()

    def _push(self, view, prefix: str, pushes: list) -> None:
        self.delivered.append((prefix, view.copy(), pushes))


def _double(x):
    return tvm.runtime.tensor(x.numpy() * 2)


def _add(a, b):
    return tvm.runtime.tensor(a.numpy() + b.numpy())


class Rig:
    """A native program of two units: ``y = 2 x`` (x from the client) pushed on a link to a
    peer as ``y1`` and delivered to a data port as ``y2``; ``w = y + z`` (z pushed by worker
    edge-b on a link) held for the client."""

    def __init__(self, units: dict | None = None, spin_s: float = 0.0) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        host, port = self.listener.getsockname()
        self.session = Session(units or {"double": _double, "add": _add})
        self.outlinks, self.inlinks = Outlinks("edge-a", timeout_s=2.0), Inlinks()
        self.outlinks.open(host, port)
        self.peer, _ = self.listener.accept()
        assert json.loads(recv_frame(self.peer)) == {LINK: "edge-a"}
        self.ops = [
            {"op": "unit", "step": 3, "function": "double", "inputs": ["x"], "out": "y",
             "pushes": [[host, port, "y1", True], ["10.0.0.9", 9, "y2", False]], "from": {},
             "held": False},
            {"op": "unit", "step": 5, "function": "add", "inputs": ["y", "z"], "out": "w",
             "pushes": [], "from": {"y": None, "z": "edge-b"}, "held": True},
        ]  # fmt: skip
        self.program = NativeProgram(self.session, self.ops, self.outlinks, self.inlinks, spin_s)
        self.link_in, theirs = socket.socketpair()
        self.inlinks.adopt(theirs)

    def pushed(self) -> list[tuple[str, np.ndarray]]:
        """What the program pushed to the peer so far, read by the Python reader."""
        reader = Inlinks()
        reader.adopt(self.peer)

        def allocate(name, shape, dtype):
            array = np.empty(shape, dtype)
            return array, array

        got = reader.receive(1.0, allocate, 1.0)
        self.peer = None  # closed with the reader
        reader.close()
        return got

    def close(self) -> None:
        self.program.close()
        self.outlinks.close()
        self.inlinks.close()
        self.link_in.close()
        self.listener.close()


@pytest.fixture
def rig():
    made = []

    def make(units=None, spin_s=0.0):
        made.append(Rig(units, spin_s))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_a_run_calls_its_units_pushes_on_links_delivers_holds_and_times_each_step(rig):
    r = rig()
    x = np.arange(4, dtype="float32")
    z = np.full(4, 10, "float32")
    for mb in range(2):
        r.session.values[f"7/{mb}:x"] = x + mb
        r.link_in.sendall(_frame(f"7/{mb}:z", z * (mb + 1)))
    before = time.perf_counter()
    started, events = r.program.run(7, 2, 2.0)
    assert before <= started <= time.perf_counter()  # this process's clock
    assert [(e[0], e[1]) for e in events] == [(3, 0), (5, 0), (3, 1), (5, 1)]
    assert all(0 <= e[2] <= e[3] and e[4] >= 0 and e[5] == -1 for e in events)
    for mb in range(2):
        np.testing.assert_array_equal(r.session.held[f"7/{mb}:w"], 2 * (x + mb) + z * (mb + 1))
    assert set(r.session.held) == {"7/0:w", "7/1:w"}  # y is not held: the client reads only w
    assert [(p, d[0][2]) for p, _, d in r.session.delivered] == [("7/0:", "y2"), ("7/1:", "y2")]
    pushed = dict(r.pushed())  # read by the Python program's reader: one format
    assert sorted(pushed) == ["7/0:y1", "7/1:y1"]
    np.testing.assert_array_equal(pushed["7/1:y1"], 2 * (x + 1))


def test_a_value_that_does_not_come_blames_its_maker_within_the_wait(rig):
    r = rig()
    r.session.values["1/0:x"] = np.ones(4, "float32")
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"LinkError from edge-b: '1/0:z' did not arrive "
                       r"within 0.3 s"):  # fmt: skip
        r.program.run(1, 1, 0.3)
    assert time.perf_counter() - start < 1.5


def test_what_a_callback_or_a_unit_raised_is_raised_as_it_was_and_the_next_run_works(rig):
    def broken(a, b):
        raise ValueError("the unit broke")

    r = rig({"double": _double, "add": broken})
    r.session.values["1/0:x"] = np.ones(4, "float32")
    r.link_in.sendall(_frame("1/0:z", np.ones(4, "float32")))
    with pytest.raises(ValueError, match="the unit broke"):
        r.program.run(1, 1, 1.0)
    with pytest.raises(TimeoutError, match="value '2/0:x' did not arrive"):  # the session's
        r.program.run(2, 1, 1.0)
    r.session.functions["add"] = tvm_ffi.convert(_add)
    fixed = NativeProgram(r.session, r.ops, r.outlinks, r.inlinks, 0.0)
    r.session.values["3/0:x"] = np.ones(4, "float32")
    r.link_in.sendall(_frame("3/0:z", np.ones(4, "float32")))
    fixed.run(3, 1, 1.0)
    np.testing.assert_array_equal(r.session.held["3/0:w"], np.full(4, 3, "float32"))
    fixed.close()


def test_older_runs_values_names_it_does_not_read_and_new_shapes_are_sorted_out(rig):
    r = rig()
    for run, n in ((1, 4), (2, 6)):  # run 2's values are larger: new memory for z
        r.session.values[f"{run}/0:x"] = np.ones(n, "float32")
        late = _frame(f"{run - 1}/0:z", np.full(n, 99, "float32"))  # an older run's
        stray = _frame(f"{run}/0:unread", np.full(3, 5, "int64"))  # no step reads it
        r.link_in.sendall(late + stray + _frame(f"{run}/0:z", np.full(n, run, "float32")))
        r.program.run(run, 1, 1.0)
        np.testing.assert_array_equal(r.session.held[f"{run}/0:w"], np.full(n, 2 + run))


@pytest.mark.parametrize("spin_s", [0.0, 0.5])  # sleeping on the links, or polling them
def test_a_large_value_arriving_in_pieces_is_received_whole(rig, spin_s):
    r = rig(spin_s=spin_s)
    z = np.random.default_rng(0).standard_normal(300_000).astype("float32")  # 1.2 MB
    r.session.values["1/0:x"] = np.zeros_like(z)
    data = _frame("1/0:z", z)

    def trickle():
        for at in range(0, len(data), 200_000):
            r.link_in.sendall(data[at : at + 200_000])
            time.sleep(0.01)

    sender = threading.Thread(target=trickle)
    sender.start()
    r.program.run(1, 1, 5.0)
    sender.join()
    np.testing.assert_array_equal(r.session.held["1/0:w"], z)


@pytest.mark.parametrize(
    "garbage",
    [b"\xff" * 40,  # a header whose name would not fit the read buffer
     HEAD.pack(16, 5, 1, 7) + b"1/0:z" + struct.pack("<q", 2) + b"float32",  # 16 bytes for 8
     HEAD.pack(4, 5, 0, 3) + b"1/0:z" + b"xyz"],  # a type with no size
)  # fmt: skip
def test_a_link_out_of_step_is_dropped_and_the_others_are_read_on(rig, garbage):
    r = rig()
    r.session.values["1/0:x"] = np.ones(2, "float32")
    r.link_in.sendall(garbage)
    other, theirs = socket.socketpair()
    r.inlinks.adopt(theirs)  # a second link, adopted while the program runs
    threading.Timer(0.1, lambda: other.sendall(_frame("1/0:z", np.ones(2, "float32")))).start()
    r.program.run(1, 1, 2.0)
    np.testing.assert_array_equal(r.session.held["1/0:w"], np.full(2, 3, "float32"))
    other.close()


def _chain(size: int):
    model = load_model(chain_module(12, size), name="chain")
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    return model, Placement(("edge-0", "edge-1"), {n: 1 for i, n in enumerate(ids) if i % 2})


def test_workers_run_natively_or_in_python_and_a_native_and_a_python_one_talk(start_workers):
    """A chain alternating over two real workers: natively (each worker says so at load), in
    Python (``native=False``), and a native worker beside one without the native library
    (``TVM_HETERO_NATIVE=0`` there): the same values over the same links, three microbatches
    of 400 KB values (sent in two pieces, read in many; small ones: test_remote_workers.py)."""
    size = 100_000
    model, placement = _chain(size)
    edges = remote_cpus(start_workers(2))
    edges.append(remote_cpus(start_workers(1, env={"TVM_HETERO_NATIVE": "0"}))[0])
    edges[2] = dataclasses.replace(edges[2], name="edge-1")
    x = [np.full(size, k, "float32") for k in range(3)]
    for pair, native, why in (
        (edges[:2], True, {}),
        (edges[:2], False, {0: "not asked for", 1: "not asked for"}),
        ([edges[0], edges[2]], True, {1: "TVM_HETERO_NATIVE=0"}),
    ):
        deployment = api.compile(model, pair, placement).deployment
        with Executor(deployment, timeout_s=30, native=native) as ex:
            assert ex._runner.not_native == why
            runs = ex.run_many([ex.place_inputs({"x": v}) for v in x])
            for k, run in enumerate(runs):
                np.testing.assert_array_equal(ex.outputs_of(run)[0], x[k] + 12)


def _dialed_to(ports: set[int]) -> int:
    """Established IPv4 TCP connections of this host dialed to one of ``ports`` (the dialing
    end's row in ``/proc/net/tcp``: its remote port is one of them)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(
        int(fields[2].rpartition(":")[2], 16) in ports and fields[3] == "01"
        for fields in (row.split() for row in rows)
    )


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's socket table")
def test_two_remote_workers_that_push_to_each_other_keep_one_link_between_them(
    start_workers, monkeypatch
):
    """The chain alternating over two real workers: each pushes to the other, and the
    client tells each its own address, so the second sends on the first's link; told none
    (``BOTH_WAYS`` off), each dials its own. Counted in the host's socket table: the
    connections to the two sessions' data ports, the client's own included, one fewer."""
    from tvm_hetero.runtime import program_links

    model, placement = _chain(8)
    deployment = api.compile(model, remote_cpus(start_workers(2)), placement).deployment
    x = np.arange(8, dtype="float32")
    dialed = {}
    for both in (True, False):
        monkeypatch.setattr(program_links, "BOTH_WAYS", both)
        with Executor(deployment, timeout_s=30) as ex:
            np.testing.assert_array_equal(ex.run({"x": x})[0], x + 12)
            ports = {w.data_port for w in ex.workers.values() if hasattr(w, "data_port")}
            dialed[both] = _dialed_to(ports)
    assert dialed[False] - dialed[True] == 1


def test_await_bytes_spins_until_bytes_come_or_its_time_passes():
    from tvm_hetero.runtime.native_remote import await_bytes

    a, b = socket.socketpair()
    with a, b:
        start = time.perf_counter()
        assert not await_bytes(a, 0.02)  # nothing came: the whole spin, then False
        assert time.perf_counter() - start >= 0.02
        assert not await_bytes(a, 0.0)  # no spin asked for
        later = threading.Timer(0.01, lambda: b.sendall(b"x"))
        later.start()
        start = time.perf_counter()
        assert await_bytes(a, 10.0)  # the byte, long before the spin's end
        assert time.perf_counter() - start < 5.0
        later.join()
        assert a.recv(1) == b"x"
        b.close()
        assert await_bytes(a, 10.0)  # the peer closed: a receive would not wait either


@pytest.mark.parametrize("spin_s", [0.0, 1e-3])
def test_a_worker_with_cores_of_its_own_spins_for_the_next_run_after_answering(monkeypatch, spin_s):
    from tvm_hetero.runtime import native_remote, rpc_worker

    spun = []
    monkeypatch.setattr(native_remote, "await_bytes", lambda conn, s: spun.append((conn, s)))
    session = rpc_worker._Session()
    session.spin_s = spin_s  # what load_program sets: spin_seconds()
    session._run_command = lambda *args: b"answer"
    a, b = socket.socketpair()
    with a, b:
        assert session._command({rpc_worker.RUN: [1, 1, 1.0, []]}, a) is False
        assert recv_frame(b) == b"\0answer"
    assert spun == ([(a, rpc_worker.NEXT_RUN_SPIN_S)] if spin_s else [])
