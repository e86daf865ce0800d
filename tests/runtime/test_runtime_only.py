"""The run path needs only the TVM runtime: what a GPU or edge box has (that its modules
import no compiler module is ``ci/check_layers.py``'s check, ``tests/test_layers.py``)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm.testing

from tvm_hetero import api
from tvm_hetero.devices import resolve_device
from tvm_hetero.plan import Placement
from tvm_hetero.zoo import load_zoo_model


def test_run_command_works_with_the_runtime_library_only(tmp_path):
    model = load_zoo_model("mlp:tiny")
    devices = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    compiled = api.compile(model, devices, Placement(("cpu@0", "cpu@1"), {"matmul": 1}))
    artifact = compiled.save(tmp_path / "mlp.tar")
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    code = (
        "import sys, tvm_hetero.cli.main as m; rc = m.main(sys.argv[1:]); "
        "import tvm; assert tvm.base._RUNTIME_ONLY; "
        "assert 'tvm.relax' not in sys.modules, 'the run path imported tvm.relax'; sys.exit(rc)"
    )
    args = ["run", str(artifact), "--print-time", "--repeat", "3", "--outputs",
            str(tmp_path / "out" / "o.npz"), "--plot", str(tmp_path / "run.png")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "p99.9" in done.stdout and "units" in done.stdout
    assert (tmp_path / "out" / "o.npz").is_file() and (tmp_path / "run.png").is_file()


def _run_runtime_only(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    code = "import sys, tvm_hetero.cli.main as m; sys.exit(m.main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )


def _cuda_artifact(tmp_path: Path) -> Path:
    model = load_zoo_model("mlp:tiny")
    devices = [resolve_device("cpu"), resolve_device("cuda")]
    rules = api.placement_from_rules(model, devices, {"matmul": "cuda"})
    return api.compile(model, devices, rules).save(tmp_path / "mlp_cuda.tar")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
@pytest.mark.skipif(tvm.testing.env.has_gpu(), reason="checks the message where no GPU is")
def test_cuda_artifact_without_a_gpu_says_why_the_runtime_cannot_run_it(tmp_path):
    done = _run_runtime_only(["run", str(_cuda_artifact(tmp_path))])
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, text
    # the runtime-only process tried to load TVM's CUDA runtime, and says what stopped it
    assert "cuda:0 is not present on this machine (TVM's CUDA runtime did not load:" in text
    assert "libcuda.so" in text and "Traceback" not in text


@pytest.mark.gpu
def test_cuda_artifact_runs_with_the_runtime_library_only(tmp_path):
    artifact = _cuda_artifact(tmp_path)
    model = load_zoo_model("mlp:tiny")
    inputs = model.random_inputs()
    np.savez(tmp_path / "in.npz", **inputs)
    done = _run_runtime_only(["run", str(artifact), "--inputs", str(tmp_path / "in.npz"),
                              "--outputs", str(tmp_path / "out.npz")])  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (want,) = api.run(api.compile(model, [resolve_device("cpu")]), inputs)
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got[got.files[0]], want, rtol=1e-5, atol=1e-6)
