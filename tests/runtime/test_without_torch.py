"""Processes that never hold a torch tensor import TVM without torch (3-4 s of their start)."""

import subprocess
import sys
from pathlib import Path


def _mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_a_started_worker_has_tvm_loaded_and_torch_not(start_workers):
    ((_, proc),) = start_workers(1)
    maps = _mapped(proc.pid)
    assert "libtvm_runtime" in maps and "libtvm_ffi" in maps  # it serves: TVM is loaded
    assert "libtorch" not in maps


def test_torch_imports_as_usual_afterwards_and_tvm_runs_numpy_tensors():
    code = (
        "import sys, numpy as np\n"
        "from tvm_hetero.runtime.without_torch import import_tvm_without_torch\n"
        "import_tvm_without_torch()\n"
        "assert 'tvm' in sys.modules and 'torch' not in sys.modules\n"
        "import tvm, torch\n"
        "print(tvm.runtime.tensor(np.arange(3.0)).numpy().sum(), torch.ones(2).sum().item())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3.0", "2.0"]


def test_with_torch_already_loaded_nothing_changes():
    code = (
        "import sys, torch\n"
        "from tvm_hetero.runtime.without_torch import import_tvm_without_torch\n"
        "import_tvm_without_torch()\n"
        "assert sys.modules['torch'] is torch and 'tvm' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
