"""The package's layers hold (``ci/check_layers.py``), and the check catches a violation."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _checker():
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "ci" / "check_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_import_goes_down():
    assert _checker().violations(ROOT / "tvm_hetero") == []


def test_a_deliberate_violation_fails(tmp_path):
    """A runtime module that imports ``api`` (two ways) and TVM's compiler, a strategy that
    imports ``cli``, and a module no layer holds: each is named."""
    package = tmp_path / "tvm_hetero"
    for folder in ("runtime", "strategies", "cli"):
        (package / folder).mkdir(parents=True)
    (package / "api.py").write_text("")
    (package / "cli" / "common.py").write_text("")
    (package / "runtime" / "executor.py").write_text(
        "import tvm\nfrom tvm_hetero import api\n\n\ndef f():\n"
        "    from tvm_hetero.api import compile\n    from tvm import relax\n"
    )
    (package / "strategies" / "toy.py").write_text("import tvm_hetero.cli.common\n")
    (package / "newcomer.py").write_text("")
    found = _checker().violations(package)
    assert len(found) == 5, found
    said = "\n".join(found)
    assert "executor.py:2: runtime.executor (runtime) imports api (api)" in said
    assert "executor.py:6: runtime.executor (runtime) imports api (api)" in said
    assert "executor.py:7: runtime.executor (runtime) imports tvm.relax" in said
    assert "strategies.toy (strategies) imports cli.common (commands)" in said
    assert "module newcomer is in no layer" in said
    clean = tmp_path / "clean" / "tvm_hetero"
    (clean / "runtime").mkdir(parents=True)
    (clean / "runtime" / "executor.py").write_text("import tvm\nfrom tvm_hetero import errors\n")
    assert _checker().violations(clean) == []
