"""The worker-to-worker data path: arrays by name over TCP, errors named, never hung on."""

import socket
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from tvm_hetero.runtime.tensor_link import (
    SOCKET_BUFFER_BYTES,
    LinkError,
    MissingValue,
    TensorFetcher,
    TensorServer,
    recv_frame,
    send_array,
)

DTYPES = st.sampled_from(["float32", "float16", "int64", "int32", "int8", "uint8", "bool"])


@pytest.fixture(scope="module")
def served():
    values: dict[str, np.ndarray] = {}
    server = TensorServer(values.__getitem__)
    fetcher = TensorFetcher(timeout_s=5)
    yield values, server.address, fetcher
    fetcher.close()
    server.close()


@settings(max_examples=40, deadline=None)
@given(array=DTYPES.flatmap(lambda d: arrays(d, array_shapes(min_dims=0, max_dims=4, min_side=0))))
def test_arrays_arrive_bit_for_bit(served, array):
    values, (host, port), fetcher = served
    values["x"] = array
    got = fetcher.fetch(host, port, "x")
    assert got.dtype == array.dtype and got.shape == array.shape
    assert got.tobytes() == array.tobytes()


def test_a_large_strided_array_and_a_missing_name(served):
    values, (host, port), fetcher = served
    values["big"] = np.arange(3 << 20, dtype=np.float32).reshape(1024, -1)[:, ::2]
    np.testing.assert_array_equal(fetcher.fetch(host, port, "big"), values["big"])
    with pytest.raises(MissingValue, match="no value 'nope'"):
        fetcher.fetch(host, port, "nope")
    assert fetcher.fetch(host, port, "big").shape == (1024, 1536)  # the connection survived


def test_a_refusing_or_silent_peer_is_an_error_not_a_hang():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(LinkError, match=rf"fetching 'x' from 127\.0\.0\.1:{port}"):
        TensorFetcher(timeout_s=1).fetch("127.0.0.1", port, "x")
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        with pytest.raises(LinkError, match="did not answer in time"):
            TensorFetcher(timeout_s=0.5).fetch("127.0.0.1", port, "x")


def test_connections_ask_for_buffers_that_hold_an_activation(served):
    """The kernel carries a whole tensor while its worker is busy (capped by the system)."""
    values, (host, port), fetcher = served
    values["x"] = np.zeros(4, np.float32)
    fetcher.fetch(host, port, "x")
    conn = fetcher._pipes[(host, port)].conn
    for option, cap in ((socket.SO_SNDBUF, "wmem_max"), (socket.SO_RCVBUF, "rmem_max")):
        system = int(Path(f"/proc/sys/net/core/{cap}").read_text())
        assert conn.getsockopt(socket.SOL_SOCKET, option) >= min(SOCKET_BUFFER_BYTES, system)


def _answer_after_two_requests(listener: socket.socket, arrays: dict) -> None:
    """A peer that answers nothing until two requests have arrived, then both, in order."""
    conn, _ = listener.accept()
    with conn:
        names = [recv_frame(conn).decode() for _ in range(2)]
        for name in names:
            send_array(conn, arrays[name])


def test_requests_are_pipelined_and_answers_kept_in_order():
    """The second request leaves before the first answer arrives (a slow link is never idle
    waiting for the next request); each answer reaches its own request."""
    arrays = {"a": np.arange(5, dtype=np.int32), "b": np.ones((2, 3), np.float32)}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        host, port = listener.getsockname()[:2]
        threading.Thread(target=_answer_after_two_requests, args=(listener, arrays)).start()
        fetcher = TensorFetcher(timeout_s=5)
        got: dict = {}
        arrived = threading.Semaphore(0)

        def done(name):
            return lambda array, err: (got.update({name: (array, err)}), arrived.release())

        for name in ("a", "b"):
            fetcher.fetch_later(host, port, name, lambda s, d: np.empty(s, d), done(name))
        assert arrived.acquire(timeout=5) and arrived.acquire(timeout=5)
        fetcher.close()
    for name, array in arrays.items():
        assert got[name][1] is None
        np.testing.assert_array_equal(got[name][0], array)


def test_a_broken_connection_fails_what_was_asked_on_it_and_the_next_reconnects(served):
    values, (host, port), _ = served
    values["x"] = np.arange(3, dtype=np.int64)
    with socket.create_server(("127.0.0.1", 0)) as listener:  # accepts, reads, hangs up
        dead_host, dead_port = listener.getsockname()[:2]
        fetcher = TensorFetcher(timeout_s=5)
        errors: list = []
        arrived = threading.Semaphore(0)
        for name in ("p", "q"):
            fetcher.fetch_later(
                dead_host, dead_port, name, lambda s, d: np.empty(s, d),
                lambda _, err: (errors.append(err), arrived.release()),
            )  # fmt: skip
        listener.accept()[0].close()
        assert arrived.acquire(timeout=5) and arrived.acquire(timeout=5)
    assert [type(e) for e in errors] == [LinkError, LinkError]
    assert "fetching 'p'" in str(errors[0])
    np.testing.assert_array_equal(fetcher.fetch(host, port, "x"), values["x"])  # another peer
    fetcher.close()


def test_a_question_sends_small_puts_with_its_command_at_once_and_a_large_one_alone(
    monkeypatch,
):
    """What the owner reads: each put's array bit for bit, then the command, in order; what
    leaves: one send for the small puts and the command, the large one by itself."""
    from tvm_hetero.runtime.tensor_link import ONE_SEND_BYTES, recv_array

    heard = []

    def on_command(message, conn):
        if "put" in message:
            heard.append((message["put"], recv_array(conn)))
        else:
            heard.append(message)
            conn.sendall(b"\x02\x00\x00\x00ok")

    server = TensorServer(lambda name: None, on_command=on_command)
    fetcher = TensorFetcher(timeout_s=5)
    sends = []
    real = socket.socket.sendall

    def sendall(self, data, *args):
        if threading.current_thread() is threading.main_thread():  # the asking side's
            sends.append(len(data))
        return real(self, data, *args)

    monkeypatch.setattr(socket.socket, "sendall", sendall)
    small = [np.arange(6, dtype="float32"), np.array(True), np.zeros((0, 2), "int64")]
    large = np.arange(ONE_SEND_BYTES // 4 + 1, dtype="float32")
    try:
        for puts, expected_sends in (
            ([("a", small[0]), ("b", small[1]), ("c", small[2])], 1),
            ([("a", small[0]), ("big", large), ("c", small[2])], 4),  # ahead, its head, it, rest
        ):
            heard.clear()
            sends.clear()
            answer = fetcher.ask(*server.address, {"run": 1}, puts, answer_s=5)
            assert answer == b"ok" and len(sends) == expected_sends
            assert [h[0] for h in heard[:-1]] == [name for name, _ in puts]
            assert heard[-1] == {"run": 1}
            for (_, got), (_, want) in zip(heard[:-1], puts, strict=True):
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)
    finally:
        fetcher.close()
        server.close()
