"""Processes that never hold a torch tensor import TVM without torch (3-4 s of their start)."""

import subprocess
import sys
from pathlib import Path

IMPORT = (
    "from tvm_hetero.runtime.without_torch import import_tvm_without_torch\n"
    "import_tvm_without_torch()\n"
)


def _python(code: str) -> str:
    """Run ``code`` in a new interpreter; its output (it must exit 0)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_started_worker_has_tvm_loaded_and_torch_not(start_workers):
    ((_, proc),) = start_workers(1)
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "libtvm_runtime" in maps and "libtvm_ffi" in maps  # it serves: TVM is loaded
    assert "libtorch" not in maps


def test_torch_imports_as_usual_afterwards_and_tvm_runs_numpy_tensors():
    out = _python(
        f"import sys, numpy as np\n{IMPORT}"
        "assert 'tvm' in sys.modules and 'torch' not in sys.modules\n"
        "import tvm, torch\n"
        "print(tvm.runtime.tensor(np.arange(3.0)).numpy().sum(), torch.ones(2).sum().item())\n"
    )
    assert out.split() == ["3.0", "2.0"]


def test_with_torch_already_loaded_nothing_changes():
    _python(
        f"import sys, torch\n{IMPORT}"
        "assert sys.modules['torch'] is torch and 'tvm' not in sys.modules\n"
    )
