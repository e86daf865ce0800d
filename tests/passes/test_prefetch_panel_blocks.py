"""PrefetchPanelBlocks: a row tile of a panel summed in blocks asks for the next block."""

from unittest.mock import patch

import numpy as np
import tvm
from conftest import fused_body
from tvm import relax
from tvm.script import tirx as T

from tvm_hetero._compat import PrimFunc, make_target
from tvm_hetero.build.multi_device import TIR_PIPELINE
from tvm_hetero.devices import cpu_device
from tvm_hetero.passes import PackConstantWeights, PrefetchPanelBlocks
from tvm_hetero.passes import prefetch_panel_blocks as pass_module
from tvm_hetero.schedules import schedule_kernels
from tvm_hetero.schedules.cpu.matmul import PREFETCH_ANNOTATION

MARK = {PREFETCH_ANNOTATION: ["B", 8]}


@T.prim_func(private=True, s_tir=True)
def _before(
    A: T.Buffer((8, 32), "float32"), B: T.Buffer((2, 32, 32), "float32"),
    C: T.Buffer((8, 64), "float32"),
):  # fmt: skip
    for p, k0 in T.grid(2, 4):
        for r in T.serial(4, annotations=MARK):
            for k1, i1, jj in T.grid(8, 2, 32):
                with T.sblock("update"):
                    vi = T.axis.spatial(8, r * 2 + i1)
                    vj = T.axis.spatial(64, p * 32 + jj)
                    vk = T.axis.spatial(32, k0 * 8 + k1)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


@T.prim_func(private=True, s_tir=True)
def _expected(
    A: T.Buffer((8, 32), "float32"), B: T.Buffer((2, 32, 32), "float32"),
    C: T.Buffer((8, 64), "float32"),
):  # fmt: skip
    for p, k0 in T.grid(2, 4):
        for r in range(4):
            if r * 10 < 16:  # 8 rows of 128 bytes: 16 lines a block
                for prefetched in T.unroll(10):
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(
                            B[T.min(p + (k0 * 8 + 8 + (r * 10 + prefetched) // 2) // 32, 1),
                              (k0 * 8 + 8 + (r * 10 + prefetched) // 2) % 32,
                              (r * 10 + prefetched) % 2 * 16]
                        ),
                        0, 3, 1,
                    )  # fmt: skip
            for k1, i1, jj in T.grid(8, 2, 32):
                with T.sblock("update"):
                    vi = T.axis.spatial(8, r * 2 + i1)
                    vj = T.axis.spatial(64, p * 32 + jj)
                    vk = T.axis.spatial(32, k0 * 8 + k1)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


@T.prim_func(private=True, s_tir=True)
def _unmarked(
    A: T.Buffer((8, 32), "float32"), B: T.Buffer((2, 32, 32), "float32"),
    C: T.Buffer((8, 64), "float32"),
):  # fmt: skip
    for p, k0, r, k1, i1, jj in T.grid(2, 4, 4, 8, 2, 32):
        with T.sblock("update"):
            vi = T.axis.spatial(8, r * 2 + i1)
            vj = T.axis.spatial(64, p * 32 + jj)
            vk = T.axis.spatial(32, k0 * 8 + k1)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


def _one(func) -> tvm.IRModule:
    return tvm.IRModule({"main": func})


def test_a_marked_row_tile_asks_for_the_next_block_of_its_panel():
    """At the start of each row tile, ten lines of the panel's next block of 8 rows (two
    lines a row of 32 floats), as long as the block has lines left; the last block asks for
    the next panel's first (the last panel's for its own); the mark is removed."""
    after = PrefetchPanelBlocks()(_one(_before))
    tvm.ir.assert_structural_equal(after["main"], _expected)


def test_the_last_block_can_ask_for_its_own_rows_again():
    """With ``NEXT_PANEL_AFTER_LAST_BLOCK`` off (to compare), the rows past the panel's last
    are clamped to it and the panel stays the same."""
    with patch.object(pass_module, "NEXT_PANEL_AFTER_LAST_BLOCK", False):
        after = PrefetchPanelBlocks()(_one(_before))["main"].script()
    assert "T.min(k0 * 8 + 8 + (r * 10 + prefetched) // 2, 31)" in after
    assert "B[p, " in after


def test_no_lines_a_tile_removes_the_mark_only():
    with patch.object(pass_module, "LINES_PER_TILE", 0):
        after = PrefetchPanelBlocks()(_one(_before))
    tvm.ir.assert_structural_equal(after["main"], _unmarked)
    assert "prefetch" not in after["main"].script()
    assert PREFETCH_ANNOTATION not in after["main"].script()


def test_an_unmarked_kernel_is_left_as_it_is():
    mod = _one(_unmarked)
    assert PrefetchPanelBlocks()(mod)["main"].same_as(_unmarked)


def _pointwise(shape, outputs: int) -> tvm.IRModule:
    """A 1x1 convolution of ``shape`` to ``outputs`` channels, its weights packed in panels,
    fused and tagged for two AVX2 cores (as ``test_cpu_rules`` builds them)."""
    weights = np.random.default_rng(0).standard_normal((outputs, shape[1], 1, 1))
    target = make_target({**cpu_device().target, "mcpu": "znver3", "num-cores": 2})
    mod = fused_body([shape], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights.astype("float32")))), target)  # fmt: skip
    return relax.transform.DeadCodeElimination()(PackConstantWeights()(mod)), target


def test_the_matmul_rule_marks_its_depth_blocks_and_the_build_prefetches_them():
    """A 1x1 convolution over 14 x 14 with 1024 input channels (its weights the columns, a
    panel of 64 KiB summed in blocks of 16 KiB): the rule marks the row-tile loop with the
    weights' name and the block's depth, the build's pipeline turns the mark into prefetches,
    and the numbers equal a build without them (and the default schedule's); a convolution
    whose panels are whole (64 input channels) is not marked."""
    mod, target = _pointwise((1, 1024, 14, 14), 64)
    scheduled = schedule_kernels(mod, "rules")
    (kernel,) = [f for _, f in scheduled.functions_items() if isinstance(f, PrimFunc)]
    assert PREFETCH_ANNOTATION in kernel.script()
    lowered = PrefetchPanelBlocks()(tvm.IRModule({"main": kernel}))["main"].script()
    assert "llvm.prefetch" in lowered and PREFETCH_ANNOTATION not in lowered

    x = np.random.default_rng(1).standard_normal((1, 1024, 14, 14)).astype("float32")

    def run(module) -> np.ndarray:
        ex = tvm.compile(module, target, tir_pipeline=TIR_PIPELINE)
        vm = relax.VirtualMachine(ex, tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    code = tvm.compile(scheduled, target, tir_pipeline=TIR_PIPELINE).mod.imports[0]
    assert "llvm.prefetch" in code.inspect_source("ll")
    with_prefetch = run(scheduled)
    with patch.object(pass_module, "LINES_PER_TILE", 0):
        without = run(scheduled)
    np.testing.assert_array_equal(with_prefetch, without)
    np.testing.assert_allclose(with_prefetch, run(mod), rtol=1e-4, atol=1e-4)

    whole, _ = _pointwise((1, 64, 14, 14), 64)
    scheduled = schedule_kernels(whole, "rules")
    assert all(PREFETCH_ANNOTATION not in f.script() for _, f in scheduled.functions_items()
               if isinstance(f, PrimFunc))  # fmt: skip
