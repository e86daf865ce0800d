"""Matmuls whose rows are known only at run time (a mixture of experts' routed tokens): the
matmul rule's tiles of four rows over panels of columns, the rows padded to whole tiles so that
a tile's accumulators have a constant size, and the numbers of the default build for every row
count, the empty one and those no tile divides included."""

from unittest.mock import patch

import numpy as np
import pytest
import tvm
from conftest import fused_kernels, kernel_script
from tvm import relax, s_tir, tirx

from tvm_hetero._compat import make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.ir.sblocks import realizes
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu import matmul

CPU = make_target({**cpu_device().target, "num-cores": 2})


def _routed(epilogue: bool) -> tvm.IRModule:
    """``x[n, 64] @ w[64, 96]`` for a symbolic ``n`` (and a bias and ReLU after it)."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType([n, 64], "float32"))
    w = relax.Var("w", relax.TensorType([64, 96], "float32"))
    bias = relax.const(rng.standard_normal(96).astype("float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = relax.op.matmul(x, w)
            if epilogue:
                y = relax.op.nn.relu(relax.op.add(y, bias))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return fused_kernels(bb.get(), CPU)


def _run(mod: tvm.IRModule, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, CPU), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()


def test_symbolic_rows_are_tiles_of_four_over_parallel_panels():
    scheduled = schedule_kernels(_routed(epilogue=False), "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    text = kernel_script(scheduled)
    assert "in T.parallel(" in text and "in T.unroll(T.int64(4))" in text, text
    assert "in range((n + T.int64(3)) // T.int64(4))" in text, text
    # A's rows past n read as zeros, the output's cropped where the tile is written back
    assert "T.if_then_else(v1 < n, x[v1, v3], T.float32(0.0))" in text, text
    assert text.count("T.where(") == 1, text


def _accumulator_shapes(scheduled: tvm.IRModule) -> list:
    """The shapes of the ``local`` buffers of the kernel of ``scheduled`` as TVM's lowering
    allocates them (``CompactBufferAllocation``: each the region its loop touches)."""
    steps = [
        s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
    ]  # fmt: skip
    with tvm.target.Target(CPU):
        lowered = tvm.transform.Sequential(steps)(scheduled)
    return [
        buffer.shape
        for _, func in lowered.functions_items() if isinstance(func, tirx.PrimFunc)
        for realize, _ in realizes(func.body)
        for buffer in realize.block.alloc_buffers if buffer.scope() == "local"
    ]  # fmt: skip


def test_the_accumulators_have_a_constant_size_only_with_the_rows_padded():
    """Skipped by a condition, the last tile's rows made the accumulators as many rows as the
    count, up to a tile (``min(n, 4)``): a buffer LLVM cannot keep in registers."""
    shapes = _accumulator_shapes(schedule_kernels(_routed(epilogue=True), "rules"))
    assert [[int(d) for d in shape] for shape in shapes] == [[1, 4, 32]], shapes
    with patch.object(matmul, "PADDED_SYMBOLIC_ROWS", False):
        skipped = _accumulator_shapes(schedule_kernels(_routed(epilogue=True), "rules"))
    assert len(skipped) == 1 and not isinstance(skipped[0][1], tirx.IntImm), skipped


def test_off_the_fallback_rule_takes_them():
    with patch.object(matmul, "SYMBOLIC_ROWS", False):
        scheduled = schedule_kernels(_routed(epilogue=False), "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:fallback"}


@pytest.mark.parametrize("epilogue", [False, True])
def test_every_row_count_gives_the_default_builds_numbers(epilogue):
    mod = _routed(epilogue)
    scheduled = schedule_kernels(mod, "rules")
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 96)).astype("float32")
    for rows in (0, 1, 3, 4, 9, 90):
        x = rng.standard_normal((rows, 64)).astype("float32")
        np.testing.assert_allclose(_run(scheduled, x, w), _run(mod, x, w), rtol=1e-5, atol=1e-5)
