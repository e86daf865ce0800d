"""The suite's build memo (``tests/build_memo.py``) reuses a build only when nothing that
makes it has changed."""

from unittest.mock import patch

import build_memo
import numpy as np
from conftest import one_op_module
from tvm import relax

from tvm_hetero.build.multi_device import build
from tvm_hetero.devices import cpu_device
from tvm_hetero.schedules.cpu import matmul


def _module():
    return one_op_module(cpu_device(0).target, [("a", (8, 16)), ("b", (16, 8))], relax.op.matmul)


def test_an_equal_module_reuses_the_build_and_a_changed_constant_does_not():
    first = build(_module())
    assert build(_module()) is first  # built from another, equal, module
    with patch.object(matmul, "TALL_ROW_TILES", not matmul.TALL_ROW_TILES):
        assert build(_module()) is not first


def test_a_patched_build_function_or_variable_builds_anew(monkeypatch):
    first = build(_module())
    monkeypatch.setattr(matmul, "TALL_ROW_TILES", matmul.TALL_ROW_TILES)  # a constant: keyed
    assert not build_memo.changes_builds(monkeypatch) and build(_module()) is first
    monkeypatch.setenv("TVM_HETERO_UNUSED", "1")
    assert build_memo.changes_builds(monkeypatch) and build(_module()) is not first
    monkeypatch.undo()
    monkeypatch.setattr(matmul, "write_by_position", matmul.write_by_position)
    assert build_memo.changes_builds(monkeypatch)


def test_other_weights_are_another_build():
    def added(value: float):
        return one_op_module(
            cpu_device(0).target, [("x", (4,))],
            lambda x: relax.op.add(x, relax.const(np.full(4, value, "float32"))),
        )  # fmt: skip

    first = build(added(1.0))
    assert build(added(2.0)) is not first and build(added(1.0)) is first
