"""PrefetchNextPanels: a row tile of a panel of laid-out weights asks for the next panel."""

from unittest.mock import patch

import numpy as np
import tvm
from conftest import fused_body
from tvm import relax
from tvm.script import tirx as T

from tvm_hetero._compat import PrimFunc, make_target
from tvm_hetero.build.multi_device import TIR_PIPELINE
from tvm_hetero.devices import cpu_device
from tvm_hetero.passes import PackConstantWeights, PrefetchNextPanels
from tvm_hetero.schedules import schedule_kernels
from tvm_hetero.schedules.cpu import matmul as rule_module
from tvm_hetero.schedules.cpu.matmul import NEXT_PANEL_ANNOTATION

MARK = {NEXT_PANEL_ANNOTATION: ["B", 1]}
IN_GROUPS = {NEXT_PANEL_ANNOTATION: ["B", 2]}


@T.prim_func(private=True, s_tir=True)
def _before(
    A: T.Buffer((4, 8), "float32"), B: T.Buffer((3, 8, 32), "float32"),
    C: T.Buffer((4, 96), "float32"),
):  # fmt: skip
    for p in T.parallel(3):
        for r in T.serial(2, annotations=MARK):
            for i1, jj in T.grid(2, 32):
                with T.sblock("init"):
                    vi = T.axis.spatial(4, r * 2 + i1)
                    vj = T.axis.spatial(96, p * 32 + jj)
                    C[vi, vj] = T.float32(0)
            for k0, k1, i1, jj in T.grid(2, 4, 2, 32):
                with T.sblock("update"):
                    vi = T.axis.spatial(4, r * 2 + i1)
                    vj = T.axis.spatial(96, p * 32 + jj)
                    vk = T.axis.spatial(8, k0 * 4 + k1)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


@T.prim_func(private=True, s_tir=True)
def _expected(
    A: T.Buffer((4, 8), "float32"), B: T.Buffer((3, 8, 32), "float32"),
    C: T.Buffer((4, 96), "float32"),
):  # fmt: skip
    for p in T.parallel(3):
        for r in range(2):
            for i1, jj in T.grid(2, 32):
                with T.sblock("init"):
                    vi = T.axis.spatial(4, r * 2 + i1)
                    vj = T.axis.spatial(96, p * 32 + jj)
                    C[vi, vj] = T.float32(0)
            for k0 in range(2):
                # 8 rows of 128 bytes: 16 lines a panel over 2 row tiles x 2 passes: 4 a pass
                if (r * 2 + k0) * 4 < 16:
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(p + 1, 2), T.min((r * 2 + k0) * 4 // 2, 7),
                                       (r * 2 + k0) * 4 % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(p + 1, 2), T.min(((r * 2 + k0) * 4 + 1) // 2, 7),
                                       ((r * 2 + k0) * 4 + 1) % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(p + 1, 2), T.min(((r * 2 + k0) * 4 + 2) // 2, 7),
                                       ((r * 2 + k0) * 4 + 2) % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(p + 1, 2), T.min(((r * 2 + k0) * 4 + 3) // 2, 7),
                                       ((r * 2 + k0) * 4 + 3) % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                for k1, i1, jj in T.grid(4, 2, 32):
                    with T.sblock("update"):
                        vi = T.axis.spatial(4, r * 2 + i1)
                        vj = T.axis.spatial(96, p * 32 + jj)
                        vk = T.axis.spatial(8, k0 * 4 + k1)
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


@T.prim_func(private=True, s_tir=True)
def _unmarked(
    A: T.Buffer((4, 8), "float32"), B: T.Buffer((3, 8, 32), "float32"),
    C: T.Buffer((4, 96), "float32"),
):  # fmt: skip
    for p in T.parallel(3):
        for r in range(2):
            for i1, jj in T.grid(2, 32):
                with T.sblock("init"):
                    vi = T.axis.spatial(4, r * 2 + i1)
                    vj = T.axis.spatial(96, p * 32 + jj)
                    C[vi, vj] = T.float32(0)
            for k0, k1, i1, jj in T.grid(2, 4, 2, 32):
                with T.sblock("update"):
                    vi = T.axis.spatial(4, r * 2 + i1)
                    vj = T.axis.spatial(96, p * 32 + jj)
                    vk = T.axis.spatial(8, k0 * 4 + k1)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


@T.prim_func(private=True, s_tir=True)
def _in_groups(
    A: T.Buffer((4, 8), "float32"), B: T.Buffer((2, 8, 32), "float32"),
    C: T.Buffer((4, 64), "float32"),
):  # fmt: skip
    for t in T.parallel(4):  # panel t // 2, its group of row tiles t % 2
        for r in T.serial(1, annotations=IN_GROUPS):
            for k0, k1, i1, jj in T.grid(2, 4, 2, 32):
                with T.sblock("update"):
                    vi = T.axis.spatial(4, t % 2 * 2 + r * 2 + i1)
                    vj = T.axis.spatial(64, t // 2 * 32 + jj)
                    vk = T.axis.reduce(8, k0 * 4 + k1)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


@T.prim_func(private=True, s_tir=True)
def _in_groups_expected(
    A: T.Buffer((4, 8), "float32"), B: T.Buffer((2, 8, 32), "float32"),
    C: T.Buffer((4, 64), "float32"),
):  # fmt: skip
    for t in T.parallel(4):
        for r in range(1):
            for k0 in range(2):
                # 16 lines a panel over 2 groups x 1 row tile x 2 passes: 4 a pass
                if ((t % 2 + r) * 2 + k0) * 4 < 16:
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(t // 2 + 1, 1), T.min(((t % 2 + r) * 2 + k0) * 4 // 2, 7),
                                       ((t % 2 + r) * 2 + k0) * 4 % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(t // 2 + 1, 1),
                                       T.min((((t % 2 + r) * 2 + k0) * 4 + 1) // 2, 7),
                                       (((t % 2 + r) * 2 + k0) * 4 + 1) % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(t // 2 + 1, 1),
                                       T.min((((t % 2 + r) * 2 + k0) * 4 + 2) // 2, 7),
                                       (((t % 2 + r) * 2 + k0) * 4 + 2) % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                    T.call_llvm_intrin(
                        "void", "llvm.prefetch",
                        T.address_of(B[T.min(t // 2 + 1, 1),
                                       T.min((((t % 2 + r) * 2 + k0) * 4 + 3) // 2, 7),
                                       (((t % 2 + r) * 2 + k0) * 4 + 3) % 2 * 16]),
                        0, 2, 1,
                    )  # fmt: skip
                for k1, i1, jj in T.grid(4, 2, 32):
                    with T.sblock("update"):
                        vi = T.axis.spatial(4, t % 2 * 2 + r * 2 + i1)
                        vj = T.axis.spatial(64, t // 2 * 32 + jj)
                        vk = T.axis.reduce(8, k0 * 4 + k1)
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 32, vk, vj % 32]


def _one(func) -> tvm.IRModule:
    return tvm.IRModule({"main": func})


def test_a_marked_row_tile_asks_for_the_next_panel_a_few_lines_a_pass():
    """In each pass of the depth loop (the outermost loop under the mark that reads the
    weights; the init block's loop does not), the next four lines of the next panel: 16 lines
    over 2 row tiles x 2 passes; the last panel asks for itself; the mark is removed."""
    after = PrefetchNextPanels()(_one(_before))
    tvm.ir.assert_structural_equal(after["main"], _expected)


def test_groups_of_a_panels_row_tiles_spread_the_next_panel_over_the_groups():
    """Where a thread takes a panel's groups of row tiles one after another (the task's panel
    ``t // 2``, its group ``t % 2``), the steps count the groups too: 16 lines over 2 groups
    x 1 row tile x 2 passes, 4 a pass; a mark whose panel is not the task over the groups asks
    for nothing."""
    after = PrefetchNextPanels()(_one(_in_groups))
    tvm.ir.assert_structural_equal(after["main"], _in_groups_expected)
    other = _in_groups.script().replace('["B", 2]', '["B", 3]')
    unasked = PrefetchNextPanels()(_one(tvm.script.from_source(other)))["main"].script()
    assert "llvm.prefetch" not in unasked and NEXT_PANEL_ANNOTATION not in unasked


def test_a_mark_naming_no_parameter_removes_the_mark_only():
    marked_elsewhere = _before.script().replace('["B", 1]', '["D", 1]')
    assert '["D", 1]' in marked_elsewhere
    after = PrefetchNextPanels()(_one(tvm.script.from_source(marked_elsewhere)))
    tvm.ir.assert_structural_equal(after["main"], _unmarked)


def test_an_unmarked_kernel_is_left_as_it_is():
    mod = _one(_unmarked)
    assert PrefetchNextPanels()(mod)["main"].same_as(_unmarked)


def _dense(rows: int, depth: int, columns: int):
    """A dense layer ``rows x depth`` by a constant ``depth x columns`` with a bias, its
    weights laid out in panels, fused and tagged for two AVX2 cores."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((depth, columns)).astype("float32")
    bias = rng.standard_normal(columns).astype("float32")
    target = make_target({**cpu_device().target, "mcpu": "znver3", "num-cores": 2})
    mod = fused_body([(1, rows, depth)], lambda bb, x: relax.op.add(
        relax.op.matmul(x, relax.const(weights)), relax.const(bias)), target)  # fmt: skip
    return relax.transform.DeadCodeElimination()(PackConstantWeights()(mod)), target


def _run(module, target, x: np.ndarray) -> np.ndarray:
    """``module``'s ``main`` on ``x``, built for ``target`` with the package's TIR pipeline."""
    ex = tvm.compile(module, target, tir_pipeline=TIR_PIPELINE)
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def _kernel(mod) -> PrimFunc:
    (kernel,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    return kernel


def test_the_matmul_rule_marks_laid_out_panels_and_the_build_prefetches_them():
    """A 28 x 512 by 512 x 512 dense layer (its weights laid out in 32 panels of 16 columns
    at compile time, 1 MiB: a panel a task, not bands of rows): the rule marks the row-tile loop with the weights'
    name, the build turns the mark into prefetches into L2 (the LLVM code calls
    ``llvm.prefetch``), and the numbers equal a build without them and the default
    schedule's; one row (a vector times a matrix) is not marked."""
    mod, target = _dense(28, 512, 512)
    scheduled = schedule_kernels(mod, "rules")
    kernel = _kernel(scheduled)
    assert f'"{NEXT_PANEL_ANNOTATION}": ["param_0", 1]' in kernel.script()
    lowered = PrefetchNextPanels()(tvm.IRModule({"main": kernel}))["main"].script()
    assert "llvm.prefetch" in lowered and NEXT_PANEL_ANNOTATION not in lowered

    x = np.random.default_rng(1).standard_normal((1, 28, 512)).astype("float32")

    code = tvm.compile(scheduled, target, tir_pipeline=TIR_PIPELINE).mod.imports[0]
    assert "llvm.prefetch" in code.inspect_source("ll")
    with_prefetch = _run(scheduled, target, x)
    with patch.object(rule_module, "NEXT_PANELS", False):
        unmarked = schedule_kernels(mod, "rules")
    assert NEXT_PANEL_ANNOTATION not in _kernel(unmarked).script()
    np.testing.assert_array_equal(with_prefetch, _run(unmarked, target, x))
    np.testing.assert_allclose(with_prefetch, _run(mod, target, x), rtol=1e-4, atol=1e-4)

    vector, _ = _dense(1, 512, 512)
    assert NEXT_PANEL_ANNOTATION not in _kernel(schedule_kernels(vector, "rules")).script()


def test_bands_of_rows_over_every_panel_are_marked_too():
    """A 28 x 256 by 256 x 512 dense layer (512 KiB of weights: each thread a band of rows
    over every panel in turn, the panel the fused task's remainder): marked, and the
    prefetches ask for the panel after the remainder's; with ``NEXT_PANELS_IN_BANDS`` off, not
    marked; the numbers equal either way."""
    mod, target = _dense(28, 256, 512)
    banded = _kernel(schedule_kernels(mod, "rules"))
    assert f'"{NEXT_PANEL_ANNOTATION}": ["param_0", 1]' in banded.script()
    lowered = PrefetchNextPanels()(tvm.IRModule({"main": banded}))["main"].script()
    assert "T.min(ax0_ax1_0_0_ax2_0_fused % T.int64(32) + T.int64(1), T.int64(31))" in lowered
    with patch.object(rule_module, "NEXT_PANELS_IN_BANDS", False):
        unmarked = schedule_kernels(mod, "rules")
    assert NEXT_PANEL_ANNOTATION not in _kernel(unmarked).script()

    x = np.random.default_rng(2).standard_normal((1, 28, 256)).astype("float32")

    np.testing.assert_array_equal(
        _run(schedule_kernels(mod, "rules"), target, x), _run(unmarked, target, x)
    )


def test_a_convolutions_groups_of_row_tiles_are_marked_and_match():
    """A 1x1 convolution of 256 -> 80 channels over 7 x 7 (its weights the columns, five
    panels of 16 for two AVX2 cores: each panel's 13 row tiles cut in 13 groups the threads
    share, a panel's groups one after another): marked with its 13 groups, the prefetches
    spread over them; with ``NEXT_PANELS_IN_GROUPS`` off, not marked; the numbers equal either
    way and the default schedule's."""
    rng = np.random.default_rng(3)
    weights = rng.standard_normal((80, 256, 1, 1)).astype("float32")
    target = make_target({**cpu_device().target, "mcpu": "znver3", "num-cores": 2})
    mod = fused_body([(1, 256, 7, 7)], lambda bb, x: relax.op.nn.relu(
        relax.op.nn.conv2d(x, relax.const(weights))), target)  # fmt: skip
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    kernel = _kernel(schedule_kernels(mod, "rules"))
    assert f'"{NEXT_PANEL_ANNOTATION}": ["param_0", 13]' in kernel.script()
    lowered = PrefetchNextPanels()(tvm.IRModule({"main": kernel}))["main"].script()
    asks = [line for line in lowered.splitlines() if "llvm.prefetch" in line]
    assert asks and all("% T.int64(13)" in line for line in asks)  # the task's group
    with patch.object(rule_module, "NEXT_PANELS_IN_GROUPS", False):
        unmarked = schedule_kernels(mod, "rules")
    assert NEXT_PANEL_ANNOTATION not in _kernel(unmarked).script()

    x = rng.standard_normal((1, 256, 7, 7)).astype("float32")

    marked = _run(schedule_kernels(mod, "rules"), target, x)
    np.testing.assert_array_equal(marked, _run(unmarked, target, x))
    np.testing.assert_allclose(marked, _run(mod, target, x), rtol=1e-4, atol=1e-4)
