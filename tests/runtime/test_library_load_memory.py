"""What loading a library costs in memory: the planners' ``LOAD_COPIES`` is measured here."""

import subprocess
import sys

import numpy as np
import tvm
from tvm import relax

from tvm_hetero.plan.edgepipe import LOAD_COPIES

MIB = 2**20
SLACK = 48 * MIB  # kernels, the VM, the allocator's own rounding

LOAD = """
import sys
import tvm
from tvm.runtime.vm import VirtualMachine

def status(key):
    line = next(l for l in open("/proc/self/status") if l.startswith(key + ":"))
    return int(line.split()[1]) * 1024

open("/proc/self/clear_refs", "w").write("5")  # the peak starts from what is held now
before = status("VmRSS")
vm = VirtualMachine(tvm.runtime.load_module(sys.argv[1]), tvm.cpu())  # as a worker loads
print(status("VmHWM") - before, status("RssAnon"), status("RssFile"))
"""


def _library(path, weights: int) -> int:
    """A chain of ``weights`` 2048 x 2048 float32 matmuls with constant weights (16 MiB each)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 2048), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            y = x
            for _ in range(weights):
                w = rng.standard_normal((2048, 2048), dtype=np.float32)
                y = bb.emit(relax.op.matmul(y, relax.const(w)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    tvm.compile(bb.get(), target="llvm").export_library(str(path))
    return weights * 2048 * 2048 * 4


def test_loading_holds_at_most_load_copies_of_the_weights(tmp_path):
    """The peak while loading is ``LOAD_COPIES`` copies of the weights plus the library's
    mapped file (clean pages, which a memory limit reclaims); and it is not much less, or the
    planners would refuse stages that fit."""
    nbytes = _library(tmp_path / "lib.so", weights=4)
    out = subprocess.run(
        [sys.executable, "-c", LOAD, str(tmp_path / "lib.so")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    peak, _, _ = (int(v) for v in out.stdout.split())
    assert peak <= (LOAD_COPIES + 1) * nbytes + SLACK, peak / nbytes
    assert peak >= LOAD_COPIES * nbytes, peak / nbytes
