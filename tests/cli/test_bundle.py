"""``tvm-hetero bundle``: what a GPU box needs runs there with the TVM runtime alone."""

import os
import subprocess
import sys

from tvm_hetero import api
from tvm_hetero.cli.main import main
from tvm_hetero.devices import cpu_device
from tvm_hetero.zoo import load_zoo_model


def test_bundle_runs_a_compiled_model_with_its_own_runtime_only_tvm(tmp_path, capsys):
    artifact = api.compile(load_zoo_model("mlp:tiny"), [cpu_device()]).save(tmp_path / "mlp.tar")
    box = tmp_path / "box"
    assert main(["bundle", str(artifact), "-o", str(box)]) == 0
    assert not (box / "site" / "tvm" / "lib" / "libtvm_compiler.so").exists()
    assert (box / "site" / "tvm" / "lib" / "libtvm_runtime_cuda.so").is_file()
    assert (box / "artifacts" / "mlp.tar").is_file()
    env = {**os.environ, "PYTHON": sys.executable}
    where = subprocess.run(
        [str(box / "tvm-hetero"), "run", str(box / "artifacts" / "mlp.tar"), "--print-time",
         "--repeat", "3"], env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stdout + where.stderr
    assert "p99.9" in where.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import tvm; print(tvm.__file__, tvm._RUNTIME_ONLY)"],
        env={**env, "PYTHONPATH": str(box / "site")}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert probe.stdout.split() == [str(box / "site" / "tvm" / "__init__.py"), "True"]
    # nothing the user made is lost: an existing bundle is never written over
    capsys.readouterr()
    assert main(["bundle", str(artifact), "-o", str(box)]) == 2
    assert "already exists" in " ".join(capsys.readouterr().out.split())
    assert main(["bundle", str(tmp_path / "nope.tar"), "-o", str(tmp_path / "b2")]) == 2
    assert not (tmp_path / "b2").exists()
