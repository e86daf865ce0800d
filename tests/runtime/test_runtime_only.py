"""The run path needs only the TVM runtime: what a GPU or edge box has."""

import ast
import os
import subprocess
import sys
from pathlib import Path

from tvm_hetero import api
from tvm_hetero.devices import resolve_device
from tvm_hetero.plan import Placement
from tvm_hetero.zoo import load_zoo_model

RUNTIME = Path(__file__).parents[2] / "tvm_hetero" / "runtime"
ALLOWED = ("tvm_hetero.runtime", "tvm_hetero.devices.spec", "tvm_hetero.errors", "tvm_hetero.ir.attrs",
           "tvm_hetero.profiling.fingerprint", "tvm_hetero.profiling.record")  # fmt: skip
COMPILER = ("tvm.relax", "tvm.tirx", "tvm.s_tir", "tvm.script", "tvm.target", "tvm.te")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_runtime_modules_import_no_compiler():
    for path in RUNTIME.glob("*.py"):
        for name in _imports(path):
            assert not name.startswith(COMPILER), f"{path.name} imports {name}"
            if name.startswith("tvm_hetero.") and name != "tvm_hetero.runtime":
                assert name.startswith(ALLOWED), f"{path.name} imports {name}"


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
