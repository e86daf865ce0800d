"""Executables exported once per process for remote workers, removed with the executable."""

import gc

import tvm
from tvm import relax
from tvm.script import relax as R

from tvm_hetero.runtime.exported import exported_library


@tvm.script.ir_module
class Double:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return R.add(x, x)


def test_an_executable_is_exported_once_and_removed_when_collected(monkeypatch):
    executable = relax.build(Double, "llvm")
    exports = []
    export = type(executable).export_library
    monkeypatch.setattr(
        type(executable), "export_library", lambda self, p: exports.append(p) or export(self, p)
    )
    path = exported_library(executable)
    assert exported_library(executable) == path and path.exists() and len(exports) == 1
    other = exported_library(relax.build(Double, "llvm"))  # another build: its own file
    assert other != path and len(exports) == 2
    gc.collect()
    assert not other.exists()  # its executable is gone
    module = tvm.runtime.load_module(str(path))
    assert module is not None
    del executable
    gc.collect()
    assert not path.exists()
