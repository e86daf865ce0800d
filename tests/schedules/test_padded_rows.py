"""Row reductions padded to whole vectors (``schedules/cpu/padded_rows.py``): the rewrite, its
refusals, and equal numbers to the unpadded kernel."""

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.schedules.cpu.padded_rows import pad_row_reductions

LOWEST = T.float32(-3.4028234663852886e38)


@T.prim_func(private=True, s_tir=True)
def row_max(
    x: T.Buffer((T.int64(2), T.int64(5)), "float32"), out: T.Buffer((T.int64(2),), "float32")
):
    for i, k in T.grid(T.int64(2), T.int64(5)):
        with T.sblock("max"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                out[vi] = LOWEST
            out[vi] = T.max(out[vi], x[vi, vk])


@T.prim_func(private=True, s_tir=True)
def row_max_padded(
    x: T.Buffer((T.int64(2), T.int64(5)), "float32"), out: T.Buffer((T.int64(2),), "float32")
):
    for i, k in T.grid(T.int64(2), T.int64(8)):
        with T.sblock("max"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(x[vi, vk])
            T.writes(out[vi])
            with T.init():
                out[vi] = LOWEST
            out[vi] = T.max(out[vi], T.if_then_else(T.likely(vk < T.int64(5)), x[vi, vk], LOWEST))


@T.prim_func(private=True, s_tir=True)
def row_sum_then_scale(
    x: T.Buffer((T.int64(3), T.int64(7)), "float32"),
    out: T.Buffer((T.int64(3), T.int64(7)), "float32"),
):
    total = T.sblock_alloc_buffer((T.int64(3),))
    for i, k in T.grid(T.int64(3), T.int64(7)):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                total[vi] = T.float32(0)
            total[vi] = x[vi, vk] + total[vi]
    for i, j in T.grid(T.int64(3), T.int64(7)):
        with T.sblock("scale"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = x[vi, vj] / total[vi]


@T.prim_func(private=True, s_tir=True)
def row_sum_then_scale_padded(
    x: T.Buffer((T.int64(3), T.int64(7)), "float32"),
    out: T.Buffer((T.int64(3), T.int64(7)), "float32"),
):
    total = T.sblock_alloc_buffer((T.int64(3),))
    for i, k in T.grid(T.int64(3), T.int64(16)):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(x[vi, vk])
            T.writes(total[vi])
            with T.init():
                total[vi] = T.float32(0)
            total[vi] = (
                T.if_then_else(T.likely(vk < T.int64(7)), x[vi, vk], T.float32(0)) + total[vi]
            )
    for i, j in T.grid(T.int64(3), T.int64(7)):
        with T.sblock("scale"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = x[vi, vj] / total[vi]


@T.prim_func(private=True, s_tir=True)
def plane_sum(
    x: T.Buffer((T.int64(2), T.int64(3), T.int64(5)), "float32"),
    out: T.Buffer((T.int64(2),), "float32"),
):
    for i, j, k in T.grid(T.int64(2), T.int64(3), T.int64(5)):
        with T.sblock("sum"):
            vi, vj, vk = T.axis.remap("SRR", [i, j, k])
            with T.init():
                out[vi] = T.float32(0)
            out[vi] = out[vi] + x[vi, vj, vk]


@T.prim_func(private=True, s_tir=True)
def row_sum_of_squares(
    x: T.Buffer((T.int64(2), T.int64(5)), "float32"), out: T.Buffer((T.int64(2),), "float32")
):
    for i, k in T.grid(T.int64(2), T.int64(5)):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                out[vi] = T.float32(0)
            out[vi] = out[vi] * T.float32(0.5) + x[vi, vk] * x[vi, vk]


@pytest.mark.parametrize(
    ("before", "length", "padded", "expected"),
    [(row_max, 5, 8, row_max_padded), (row_sum_then_scale, 7, 16, row_sum_then_scale_padded)],
)
def test_reductions_run_over_the_padded_row_combining_their_identity(
    before, length, padded, expected
):
    """The reduction's axis and loop reach ``padded``; the extra elements combine its initial
    value (the lowest float for a max, 0 for a sum), on whichever side of the combiner the
    value is; the element-wise block is left as it was."""
    tvm.ir.assert_structural_equal(pad_row_reductions(before, length, padded), expected)


@pytest.mark.parametrize(
    ("func", "length"),
    [(plane_sum, 5), (row_max, 7), (row_sum_of_squares, 5)],
    ids=["two reduction axes", "another length", "not out = combine(out, value)"],
)
def test_other_reductions_are_refused(func, length):
    assert pad_row_reductions(func, length, 16) is None


@pytest.mark.parametrize(
    ("before", "length", "padded"), [(row_max, 5, 8), (row_sum_then_scale, 7, 16)]
)
def test_padded_kernels_compute_what_the_rows_do(before, length, padded):
    """Equal outputs on rows of negative values (where a padding of 0 would win a max)."""
    target = tvm.target.Target("llvm")
    shapes = [[int(d) for d in p.shape] for p in before.params]
    inputs = [-5 - np.random.default_rng(0).random(shapes[0]).astype("float32")]
    outputs = []
    for func in (before, pad_row_reductions(before, length, padded)):
        lib = tvm.compile(tvm.IRModule({"k": func.with_attr("global_symbol", "k")}), target)
        out = tvm.runtime.empty(shapes[-1], "float32")
        lib["k"](tvm.runtime.tensor(inputs[0]), out)
        outputs.append(out.numpy())
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-6)
