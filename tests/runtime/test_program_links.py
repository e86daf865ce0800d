"""Program links: a remote worker's program sends its values straight to its peer's program."""

import json
import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

from tvm_hetero.runtime import program_links
from tvm_hetero.runtime.program_links import (
    HEAD,
    LINK,
    READ_BYTES,
    Inlinks,
    Outlinks,
    quota_limited,
)
from tvm_hetero.runtime.tensor_link import ONE_SEND_BYTES, TensorServer, recv_frame, send_frame
from tvm_hetero.runtime.worker import use_threads


def header(name, shape, dtype, nbytes):
    """The header a link's value of ``name``, ``shape`` and ``dtype`` (``nbytes``) starts with,
    written out here from ``HEAD``'s description (not by ``Outlinks``)."""
    label, kind = name.encode(), dtype.encode()
    dims = struct.pack(f"<{len(shape)}q", *shape)
    return HEAD.pack(nbytes, len(label), len(shape), len(kind)) + label + dims + kind


def _allocate(name, shape, dtype):
    array = np.empty(shape, dtype)
    return array, array


@pytest.fixture
def linked():
    """A peer's data port whose link commands hand connections to its program's Inlinks (as
    the worker's session does), and this side's Outlinks opened to it."""
    inlinks, commands = Inlinks(), []

    def command(message, conn):
        commands.append(message)
        if LINK in message:
            inlinks.adopt(conn)
            return True
        return False

    server = TensorServer(lambda name: np.zeros(1), on_command=command)
    out = Outlinks("edge-a", timeout_s=5)
    out.open(*server.address)
    yield inlinks, out, server.address, commands
    out.close()
    server.close()
    inlinks.close()


def _adopted(inlinks, within_s=5.0):
    """The links ``inlinks`` reads once the fixture's own link is in (the peer's server
    hands it over from its own thread, a moment after ``open`` returns)."""
    deadline = time.perf_counter() + within_s
    while not inlinks._links and time.perf_counter() < deadline:
        inlinks.receive(0.05, _allocate, 5.0)
    assert len(inlinks._links) == 1, "the fixture's link was not adopted"
    return dict(inlinks._links)


def _collect(inlinks, names, within_s=5.0):
    got, deadline = {}, time.perf_counter() + within_s
    while set(names) - set(got) and time.perf_counter() < deadline:
        got.update(inlinks.receive(0.5, _allocate, 5.0))
    return got


def test_values_arrive_bit_for_bit_in_the_order_sent_whatever_their_size(linked):
    inlinks, out, (host, port), commands = linked
    rng = np.random.default_rng(0)
    sent = {
        "1/0:a": rng.standard_normal((3, 5)).astype("float32"),
        "1/0:scalar": np.array(7, "int64"),
        "1/0:empty": np.zeros((0, 4), "float16"),
        "1/1:strided": rng.standard_normal((6, 8)).astype("float32")[:, ::2],
        "1/1:large": rng.integers(0, 255, ONE_SEND_BYTES * 3, dtype="uint8"),
        "1/1:bool": rng.random(17) > 0.5,
    }
    for name, array in sent.items():
        out.send(host, port, name, array)
    got = _collect(inlinks, sent)
    assert set(got) == set(sent)
    for name, array in sent.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape
        np.testing.assert_array_equal(got[name], array)
    assert commands == [{LINK: "edge-a"}]  # the link's values never reached the server


def test_many_small_values_past_the_read_buffers_end_arrive_whole(linked):
    """Values queued faster than read: one ``recv`` fills the reader's buffer with many, the
    last one cut inside its header or its bytes."""
    inlinks, out, (host, port), _ = linked
    _adopted(inlinks)
    names = [f"1/0:value-{i}" for i in range(4 * READ_BYTES // 48)]
    for i, name in enumerate(names):
        out.send(host, port, name, np.full(i % 5, i, "int32"))
    got = _collect(inlinks, names, within_s=20)
    assert set(got) == set(names)
    for i, name in enumerate(names):
        np.testing.assert_array_equal(got[name], np.full(i % 5, i, "int32"))


def test_values_sent_from_two_threads_on_one_link_stay_whole(linked):
    inlinks, out, (host, port), _ = linked
    big = np.arange(ONE_SEND_BYTES, dtype="int32")  # four sends' worth each
    names = [f"1/0:{t}-{i}" for t in "ab" for i in range(20)]

    def send(thread):
        for i in range(20):
            out.send(host, port, f"1/0:{thread}-{i}", big + i)

    threads = [threading.Thread(target=send, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    got = _collect(inlinks, names, within_s=20)
    for t in threads:
        t.join()
    assert set(got) == set(names)
    for name in names:
        np.testing.assert_array_equal(got[name], big + int(name.rpartition("-")[2]))


def test_a_sleeping_reader_wakes_at_once_for_a_value_or_a_wake(linked):
    inlinks, out, (host, port), _ = linked
    assert inlinks.receive(0.5, _allocate, 5.0) == []  # the link adopted (its own wake-up)
    threading.Timer(0.2, inlinks.wake).start()
    start = time.perf_counter()
    assert inlinks.receive(10.0, _allocate, 5.0) == []
    assert 0.15 < time.perf_counter() - start < 2.0
    threading.Timer(0.2, out.send, (host, port, "1/0:x", np.ones(3, "float32"))).start()
    start = time.perf_counter()
    assert _collect(inlinks, ["1/0:x"])
    assert time.perf_counter() - start < 2.0


def test_a_link_cut_or_stalled_inside_a_value_is_dropped_not_hung_on(linked):
    inlinks, _, address, _ = linked
    fixture_link = _adopted(inlinks)
    for close in (True, False):
        conn = socket.create_connection(address)
        send_frame(conn, json.dumps({LINK: "edge-b"}).encode())
        promised = header("1/0:v", (1 << 20,), "float32", 4 << 20)
        conn.sendall(promised + b"\0" * 1000)
        if close:
            conn.close()
        start = time.perf_counter()
        got = []
        while time.perf_counter() - start < 3:
            got += inlinks.receive(0.1, _allocate, 0.3)
        assert got == []
        assert inlinks._links == fixture_link, "the link was not dropped"
        conn.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"not a header, and longer than one" * 3,
        header("1/0:v", (-1,), "float32", 4),
        header("1/0:v", (2,), "float32", 4),  # bytes that do not match its shape
        header("1/0:v", (1,), "no such type", 4),
        header("1/0:v", (1,), "float32", 4)[:-3] + b"\xff\xfe\xfd",  # not UTF-8
    ],
)
def test_a_link_that_sends_garbage_is_dropped_and_the_others_go_on(linked, garbage):
    inlinks, out, (host, port), _ = linked
    fixture_link = _adopted(inlinks)
    with socket.create_connection((host, port)) as bad:
        send_frame(bad, json.dumps({LINK: "edge-b"}).encode())
        bad.sendall(garbage + b"\0" * 64)
        out.send(host, port, "1/0:good", np.arange(5.0))
        got = _collect(inlinks, ["1/0:good"])
        start = time.perf_counter()
        while len(inlinks._links) > len(fixture_link) and time.perf_counter() - start < 3:
            got.update(inlinks.receive(0.1, _allocate, 0.3))
    np.testing.assert_array_equal(got["1/0:good"], np.arange(5.0))
    assert inlinks._links == fixture_link


@pytest.fixture
def sessions():
    """Two worker sessions' data ports (``rpc_worker._Session``: their own link commands),
    each with a function making its program's Outlinks as ``load_program`` does; ``both``:
    whether they are told their own address (links both ways)."""
    from tvm_hetero.runtime.rpc_worker import _Session

    made, outs = [_Session(), _Session()], []

    def outlinks(k, both=True):
        me = ("127.0.0.1", made[k].data_port()) if both else None
        outs.append(Outlinks(f"edge-{k}", 5, inlinks=made[k].inlinks, me=me))
        return outs[-1]

    for session in made:
        session.data_port()
    yield made, outlinks
    for out in outs:
        out.close()
    for session in made:
        session.server.close()
        session.inlinks.close()


def _sender(out, host, port):
    """The socket ``out`` sends on to the peer at ``host:port``."""
    return out._links[host, port][0]


@pytest.mark.parametrize("both", [True, False])
def test_two_workers_pushing_to_each_other_share_one_link_both_ways(sessions, both):
    """The second to load its program sends on the first's link (no connection of its own);
    told no address, each opens its own, as before. Values arrive whole either way."""
    (a, b), outlinks = sessions
    pa, pb = a.data_port(), b.data_port()
    out_a = outlinks(0, both)
    out_a.open("127.0.0.1", pb)
    out_b = outlinks(1, both)
    out_b.open("127.0.0.1", pa)
    b_sends_on = _sender(out_b, "127.0.0.1", pa)
    # on the link a dialed, b's end is its data port's; a link b dialed ends at a's
    assert (b_sends_on.getsockname()[1] == pb) == both
    assert (b_sends_on.getpeername()[1] == pa) == (not both)
    x, y = np.arange(12.0).reshape(3, 4), np.arange(7, dtype="int64")
    out_a.send("127.0.0.1", pb, "1/0:x", x)
    out_b.send("127.0.0.1", pa, "1/0:y", y)
    np.testing.assert_array_equal(_collect(b.inlinks, ["1/0:x"])["1/0:x"], x)
    np.testing.assert_array_equal(_collect(a.inlinks, ["1/0:y"])["1/0:y"], y)


def test_a_program_loaded_again_sends_on_its_link_and_a_closed_one_is_dialed_anew(sessions):
    (a, b), outlinks = sessions
    pb = b.data_port()
    first = outlinks(0)
    first.open("127.0.0.1", pb)
    link = a.inlinks.link_to("127.0.0.1", pb)
    first.close()  # a program loaded again: the session's link stays
    again = outlinks(0)
    again.open("127.0.0.1", pb)
    assert a.inlinks.link_to("127.0.0.1", pb) is link
    again.send("127.0.0.1", pb, "2/0:v", np.ones(3, "float32"))
    assert "2/0:v" in _collect(b.inlinks, ["2/0:v"])
    b.inlinks.close()  # the peer's end goes
    deadline = time.perf_counter() + 5
    while a.inlinks.link_to("127.0.0.1", pb) is not None and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert a.inlinks.link_to("127.0.0.1", pb) is None
    b.inlinks = Inlinks()
    third = outlinks(0)
    third.open("127.0.0.1", pb)  # a new link, adopted by the peer's new reader
    assert a.inlinks.link_to("127.0.0.1", pb) not in (None, link)
    third.send("127.0.0.1", pb, "3/0:v", np.ones(2, "float32"))
    assert "3/0:v" in _collect(b.inlinks, ["3/0:v"])


def test_a_peer_that_does_not_take_a_link_both_ways_fails_its_open():
    """A data port that reads the link command and closes (or answers something else): the
    open fails at once, not when a run waits for values that never come."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer(reply):
        conn, _ = listener.accept()
        with conn:
            assert json.loads(recv_frame(conn)) == {LINK: "edge-a", "back": ["127.0.0.1", 1]}
            conn.sendall(reply)

    inlinks = Inlinks()
    try:
        for reply in (b"", b"?"):
            thread = threading.Thread(target=answer, args=(reply,))
            thread.start()
            out = Outlinks("edge-a", 5, inlinks=inlinks, me=("127.0.0.1", 1))
            with pytest.raises(ConnectionError):
                out.open("127.0.0.1", port)
            thread.join()
            assert inlinks.fds() == []
    finally:
        inlinks.close()
        listener.close()


@pytest.mark.parametrize(
    "back",
    [
        "127.0.0.1:1",
        [1, 2],
        ["127.0.0.1"],
        ["127.0.0.1", "80"],
        ["127.0.0.1", 70000],
        ["127.0.0.1", True],
        {"host": 1},
    ],
)
def test_a_link_command_with_a_back_address_that_is_not_one_is_closed_and_the_port_serves_on(
    sessions, back
):
    """A stranger's link command whose ``back`` is no ``[host, port]``: the session's data
    port closes that connection (no answer, nothing adopted, no traceback from its thread)
    and takes a proper link next."""
    (a, _), outlinks = sessions
    port = a.data_port()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as bad:
        send_frame(bad, json.dumps({LINK: "edge-x", "back": back}).encode())
        assert bad.recv(1) == b""  # closed, not LINKED
    assert a.inlinks.fds() == []
    out = outlinks(1)
    out.open("127.0.0.1", port)
    assert len(a.inlinks.fds()) == 1


def test_sending_to_a_peer_that_is_gone_raises_and_an_unopened_one_is_refused(linked):
    _, out, (host, port), _ = linked
    with pytest.raises(KeyError):
        out.send(host, port + 1, "1/0:v", np.ones(1))
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed_port = free.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        out.open("127.0.0.1", closed_port)


@pytest.mark.parametrize(
    ("lines", "files", "limited"),
    [
        ("4:cpu,cpuacct:/tvm-hetero/e0\n", {"cpu,cpuacct/tvm-hetero/e0/cpu.cfs_quota_us": "45000"},
         True),
        ("4:cpu,cpuacct:/\n", {"cpu,cpuacct/cpu.cfs_quota_us": "-1"}, False),
        ("4:cpuacct,cpu:/a\n", {"cpu/a/cpu.cfs_quota_us": "20000"}, True),
        ("0::/job\n", {"job/cpu.max": "60000 100000"}, True),
        ("0::/\n", {"cpu.max": "max 100000"}, False),
        ("7:blkio:/\n", {}, False),
    ],
)  # fmt: skip
def test_a_cpu_quota_is_read_from_cgroup_v1_and_v2(tmp_path, lines, files, limited):
    cgroups = tmp_path / "cgroup"
    cgroups.write_text(lines)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text + "\n")
    assert quota_limited(cgroups, tmp_path / "fs") is limited
    assert quota_limited(tmp_path / "missing", tmp_path / "fs") is False


def test_a_worker_spins_only_with_cores_of_its_own_and_no_quota(monkeypatch):
    everything = set(range(os.cpu_count() or 1))
    monkeypatch.setattr(program_links, "quota_limited", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: everything)
    assert program_links.spin_seconds() == 0.0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(list(everything)[:1]))
    if len(everything) > 1:
        assert program_links.spin_seconds() == program_links.SPIN_S
    monkeypatch.setattr(program_links, "quota_limited", lambda: True)
    assert program_links.spin_seconds() == 0.0


def test_tvms_pool_leaves_the_calling_thread_on_the_cores_it_was_given():
    """TVM's pool set its thread's affinity to every core: a worker started under ``taskset``
    ran unpinned (and never spun)."""
    one = {min(os.sched_getaffinity(0))}
    result = []

    def on_one_core():
        os.sched_setaffinity(0, one)
        use_threads(1)
        result.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=on_one_core)
    thread.start()
    thread.join()
    assert result == [one]
