"""ONNX Runtime beside ``optimize``'s candidates on a cluster's devices: run by each device's
worker (real ``tvm-hetero worker`` processes on loopback), each run timed from the client as
the candidates' are, in the same rounds as the candidates that need the same worker; a worker
that cannot run it is said, not fatal."""

import conftest
import pytest
from conftest import remote_cpus

from tvm_hetero.errors import RunError
from tvm_hetero.frontends import load_model
from tvm_hetero.optimize.peer import RemoteOnnxRuntimePeer
from tvm_hetero.optimize.search import optimize
from tvm_hetero.strategies import registry


@pytest.fixture
def mlp_onnx(tmp_path):
    return conftest.mlp_onnx(tmp_path / "mlp.onnx")


def test_onnx_runtime_runs_on_each_workers_device_in_the_same_rounds(
    tmp_path, mlp_onnx, start_workers, monkeypatch
):  # fmt: skip
    monkeypatch.setattr(registry, "PACKAGES", {})  # each device alone and ONNX Runtime
    edges = remote_cpus(start_workers(2))
    found = optimize(load_model(str(mlp_onnx)), edges, runs=6, rounds=3, onnx=str(mlp_onnx),
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    peers = {e.name: e for e in found.entries if e.kind == "peer"}
    assert set(peers) == {"ORT on edge-0", "ORT on edge-1"}
    # each worker served its device alone and ONNX Runtime in turn, one session at a time
    assert all(len(e.samples_s) == 6 and e.status == "timed" for e in peers.values())
    assert all(0 < s < 1 for e in peers.values() for s in e.samples_s)
    singles = [e for e in found.entries if e.kind == "single"]
    assert len(singles) == 2 and all(len(e.samples_s) == 6 for e in singles)


@pytest.fixture
def without_onnxruntime(tmp_path, monkeypatch):
    """Workers started after this one find an ``onnxruntime`` that fails to import (set up
    before ``start_workers``, which reads the environment when it is set up)."""
    fake = tmp_path / "no_ort" / "onnxruntime"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('onnxruntime is missing on this box')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))


def test_a_worker_without_onnxruntime_is_said_and_the_search_goes_on(
    tmp_path, mlp_onnx, without_onnxruntime, start_workers, monkeypatch
):  # fmt: skip
    monkeypatch.setattr(registry, "PACKAGES", {})
    (edge,) = remote_cpus(start_workers(1))
    found = optimize(load_model(str(mlp_onnx)), [edge], runs=4, rounds=2, onnx=str(mlp_onnx),
                     settings={"db": str(tmp_path / "db.jsonl")})  # fmt: skip
    (peer,) = [e for e in found.entries if e.kind == "peer"]
    assert peer.name == "ORT on edge-0" and not peer.samples_s
    assert peer.status.startswith("failed: opening ONNX Runtime on edge-0")
    assert "onnxruntime is missing on this box" in peer.status
    assert found.kept.name == "edge-0 alone" and len(found.kept.samples_s) == 4


def test_a_file_the_worker_refuses_fails_naming_the_device_and_the_worker_serves_on(
    tmp_path, mlp_onnx, start_workers
):  # fmt: skip
    (edge,) = remote_cpus(start_workers(1))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(RunError, match="opening ONNX Runtime on edge-0") as err:
        RemoteOnnxRuntimePeer(bad, edge, []).open()
    assert err.value.device == "edge-0"
    import numpy as np

    peer = RemoteOnnxRuntimePeer(mlp_onnx, edge, [np.ones((4, 16), "float32")], timeout_s=20)
    try:
        assert len(peer(3, warmup=1)) == 3
        peer.release()  # let go, and opened again by the next call
        assert len(peer(2)) == 2
    finally:
        peer.close()


def test_each_run_sends_its_inputs_and_brings_onnx_runtimes_outputs_back(
    tmp_path, mlp_onnx, start_workers
):  # fmt: skip
    import numpy as np
    import onnxruntime as ort

    (edge,) = remote_cpus(start_workers(1))
    local = ort.InferenceSession(str(mlp_onnx), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    peer = RemoteOnnxRuntimePeer(mlp_onnx, edge, [np.zeros((4, 16), "float32")], timeout_s=20)
    try:
        for _ in range(3):  # new inputs each run: the answer is this run's, not the first's
            x = rng.standard_normal((4, 16), dtype=np.float32)
            peer.inputs = [x]
            (out,) = peer.run()
            np.testing.assert_allclose(out, local.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    finally:
        peer.close()


def test_inputs_the_model_does_not_take_fail_naming_the_device(mlp_onnx, start_workers):
    import numpy as np

    (edge,) = remote_cpus(start_workers(1))
    two = [np.ones((4, 16), "float32")] * 2
    with pytest.raises(RunError, match=r"opening ONNX Runtime on edge-0.*takes 1 inputs, got 2"):
        RemoteOnnxRuntimePeer(mlp_onnx, edge, two, timeout_s=20).open()
    wrong = RemoteOnnxRuntimePeer(mlp_onnx, edge, [np.ones((4, 7), "float32")], timeout_s=20)
    with pytest.raises(RunError, match="running ONNX Runtime on edge-0") as err:
        wrong(2)
    assert err.value.device == "edge-0"
