"""Rows of dot products against a vector on CPUs: a batched matrix-vector product whose
matrices are read once (a mixture of experts' weights gathered per token)."""

from __future__ import annotations

import math

from tvm import ir, s_tir, tirx
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import (
    PARALLEL_MIN_ELEMENTS,
    CpuRule,
    const_extents,
    index_step,
    is_int,
    is_serial,
    uses_var,
    vector_lanes,
)


class DotProducts(CpuRule):
    """``C[..., i, (1)] = sum_k A[..., i, k] * X[..., k, (1)]``: one reduction axis, innermost and
    of unit step in both reads, a row axis that ``A`` reads and ``X`` does not.

    Each row is a task of the parallel loop: its depth summed in a vector of partial sums
    (``rfactor`` over the vector's lanes, the sums in registers), the lanes added after.
    transformers' batched experts (Mixtral, Qwen3-MoE, ...) multiply each token by its own
    gathered expert matrix, a quarter of a gigabyte a layer read once; the package's
    ``gemm_form`` reads no matmul in a block whose column axis has extent one, and the
    convolution rule took these kernels reading the rows across their depth a lane at a
    time: 256 x 1024 x 256 in 38-40 ms, 17 so, ONNX Runtime's MatMul 12-13 (AMD EPYC Zen 4;
    four or eight rows a task 30-34, vectors of 32 lanes 22). Tried before the convolution
    rule.
    """

    name = "dot_products"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        if len(blocks) != 1:
            return None
        (block,) = blocks
        stmt = sch.get(block)
        loops = sch.get_loops(block)
        extents = const_extents(sch, loops)
        if extents is None or len(loops) != len(stmt.iter_vars) or not _dot_products(stmt):
            return None
        lanes = vector_lanes(target, 32)
        if extents[-1] % lanes or extents[-1] < 2 * lanes:
            return None
        *spatial, k = loops
        _, k1 = sch.split(k, [None, lanes])
        task = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        partial = sch.rfactor(k1, factor_axis=len(stmt.writes[0].region))
        sch.set_scope(partial, 0, "local")
        sch.vectorize(sch.get_loops(partial)[-1])
        if math.prod(extents) >= PARALLEL_MIN_ELEMENTS and not is_serial(target):
            sch.parallel(task)  # before the reductions are decomposed: TVM refuses it after
        init = sch.decompose_reduction(partial, sch.get_loops(partial)[1])
        sch.vectorize(sch.get_loops(init)[-1])
        sch.decompose_reduction(block, sch.get_loops(block)[-1])
        return sch


def _dot_products(stmt: s_tir.SBlock) -> bool:
    """Whether ``stmt`` sums products of two reads over its last iterator only, each read a
    run of memory along it (:func:`_runs_along`), and one spatial iterator of extent two or
    more read by the first and not by the second (the rows)."""
    *spatial, k = stmt.iter_vars
    if k.iter_type != tirx.IterVar.CommReduce or any(
        iv.iter_type != tirx.IterVar.DataPar for iv in spatial
    ):
        return False
    body = stmt.body
    value = getattr(body, "value", None)
    if not isinstance(body, tirx.BufferStore) or not isinstance(value, tirx.Add):
        return False
    product = value.b
    if not isinstance(product, tirx.Mul):
        return False
    reads = [product.a, product.b]
    if not all(isinstance(r, ir.expr.TensorLoad) for r in reads):
        return False
    if not all(_runs_along(r, k.var) for r in reads):
        return False
    rows = [
        iv for iv in spatial
        if int(iv.dom.extent) > 1
        and any(uses_var(i, iv.var) for i in reads[0].indices)
        and not any(uses_var(i, iv.var) for i in reads[1].indices)
    ]  # fmt: skip
    return len(rows) == 1


def _runs_along(load: ir.expr.TensorLoad, k: tirx.Var) -> bool:
    """Whether ``load`` reads consecutive elements as ``k`` steps: one index moves with it by
    one, no other uses it, and every dimension after that index has extent one (``X[b, k, 0]``
    of a ``(B, K, 1)`` vector)."""
    used = [p for p, index in enumerate(load.indices) if uses_var(index, k)]
    if len(used) != 1 or index_step(load.indices[used[0]], k) != 1:
        return False
    return all(is_int(extent, 1) for extent in list(load.source.shape)[used[0] + 1 :])
