"""Matmul, dense and batch matmul on CPUs: packed weights, register tiles, parallel panels."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight.gpu.matmul import (
    IterKind,
    IterTrait,
    get_index_map,
    get_reduction_blocks,
    make_iter_fusion_index_map,
)
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import (
    PARALLEL_MIN_FLOPS,
    CpuRule,
    accumulate_in_registers,
    const_extents,
    inline_producers,
    largest_divisor,
    output_bits,
    vector_lanes,
)

ROWS_PER_TILE = 4
"""Rows of the register tile (MR): MR x NR accumulators stay in vector registers."""
MIN_COLS = 8
"""Below this many output columns the rule leaves the kernel to dlight's GEMV or the fallback."""


class Matmul(CpuRule):
    """``C[b, i, j] += A[b, i, k] * B[b, j, k]`` in any layout, with fused epilogues.

    The kernel is normalized to ``[batch, I, J, K]`` (``reindex``). Where ``B`` is not read with
    ``J`` innermost it is packed per call into panels ``[batch, J / NR, K, NR]`` so the innermost
    loop reads it contiguously; each ``MR x NR`` output tile accumulates in registers over the
    whole ``K`` (``cache_write`` to ``local``), ``NR`` is vectorized and ``MR`` unrolled, and the
    ``(batch, J / NR)`` panels are the parallel loop (``B``'s panel stays in L2 across ``I``).
    Element-wise epilogues (bias, activation) are folded into the tile's write-back. A column
    count with no divisor that fills a vector is padded to whole panels (``pad_einsum``: B's
    panel gets zero columns, which are computed and dropped).
    """

    name = "matmul"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        reductions = get_reduction_blocks(sch, blocks)
        if not reductions or matmul_index_maps(sch.get(reductions[0])) is None:
            return None
        main = reductions[0]
        if len(sch.get(main).reads) != 2 or not _plain_indices(sch.get(main)):
            return None  # a convolution's window indices (y + ry) belong to the Conv rule
        reindex_a = sch.reindex(main, ("read", 0))
        reindex_b = sch.reindex(main, ("read", 1))
        reindex_c = sch.reindex(main, ("write", 0))
        matmul_map, a_map, b_map, c_map = matmul_index_maps(sch.get(main))
        sch.transform_layout(reindex_a, ("write", 0), a_map)
        sch.transform_layout(reindex_b, ("write", 0), b_map)
        sch.transform_layout(reindex_c, ("read", 0), c_map)
        sch.transform_block_layout(main, matmul_map)

        extents = const_extents(sch, sch.get_loops(main))
        if extents is None:
            return None
        batches, rows, cols, depth = extents
        parallel = batches * rows * cols * depth >= PARALLEL_MIN_FLOPS
        bits = output_bits(sch, main)
        pack = reindex_b
        padded = padded_columns(target, bits, cols)
        if padded != cols:  # columns in full panels; B's pad columns are zeros, C's are dropped
            sch.pad_einsum(main, [1, 1, 2 * vector_lanes(target, bits), 1])
            pack, cols = sch.get_consumers(reindex_b)[0], padded
        nr = panel_width(target, bits, cols)
        if nr is None:
            return None
        mr = largest_divisor(rows, ROWS_PER_TILE)

        sch.compute_inline(reindex_a)
        if pack.same_as(reindex_b) and _columns_contiguous(sch, main, reindex_b, nr):
            inline_producers(sch, main)
        else:  # B packed into NR-wide panels, K-major inside a panel
            sch.transform_layout(pack, ("write", 0), lambda b, j, k: (b, j // nr, k, j % nr))
            inline_producers(sch, pack)
            inline_producers(sch, main, keep=(sch.get(pack).name_hint,))
            self._schedule_pack(sch, pack, parallel)

        batch, i, j, k = sch.get_loops(main)
        j0, j1 = sch.split(j, [None, nr])
        i0, i1 = sch.split(i, [None, mr])
        sch.reorder(batch, j0, i0, k, i1, j1)
        panel = sch.fuse(batch, j0)
        if parallel:
            sch.parallel(panel)
        sch.unroll(i1)
        sch.vectorize(j1)

        accumulate_in_registers(sch, main, i0, k)
        return sch

    @staticmethod
    def _schedule_pack(sch: s_tir.Schedule, block, parallel: bool) -> None:
        loops = sch.get_loops(block)
        if parallel and len(loops) >= 2:
            sch.parallel(sch.fuse(*loops[:2]))


def matmul_index_maps(block: s_tir.SBlock) -> tuple[tirx.IndexMap, ...] | None:
    """dlight's ``(matmul, A, B, C)`` maps to ``[batch, I, J, K]``, also for one row of ``A``.

    dlight counts an axis of extent 1 as no axis and declines a block with no ``I``: every
    batch-1 dense layer (``x[1, K] @ W[K, N]``). Such a block gets ``I`` as the constant 0.
    """
    maps = get_index_map(block)
    if maps is not None or len(block.reads) != 2 or len(block.writes) != 1:
        return maps
    a_axes, b_axes, c_axes = (
        _axes(region) for region in (block.reads[0], block.reads[1], block.writes[0])
    )
    traits = {}
    for iv in block.iter_vars:
        var, extent = iv.var, iv.dom.extent
        if isinstance(extent, tirx.IntImm) and int(extent) == 1:
            kind = IterKind.kIter_T
        elif iv.iter_type == tirx.IterVar.CommReduce and var in a_axes and var in b_axes:
            kind = IterKind.kIter_K
        elif iv.iter_type == tirx.IterVar.DataPar and var in b_axes and var in c_axes:
            kind = IterKind.kIter_S if var in a_axes else IterKind.kIter_J
        else:
            return None
        traits[var] = IterTrait(kind, extent)
    if {t.kind for t in traits.values()} & {IterKind.kIter_J, IterKind.kIter_K} != {
        IterKind.kIter_J,
        IterKind.kIter_K,
    }:
        return None
    order = {
        "matmul": [IterKind.kIter_S, IterKind.kIter_I, IterKind.kIter_J, IterKind.kIter_K],
        "a": [IterKind.kIter_S, IterKind.kIter_I, IterKind.kIter_K],
        "b": [IterKind.kIter_S, IterKind.kIter_J, IterKind.kIter_K],
        "c": [IterKind.kIter_S, IterKind.kIter_I, IterKind.kIter_J],
    }
    used = {"matmul": None, "a": a_axes, "b": b_axes, "c": c_axes}
    return tuple(
        make_iter_fusion_index_map(
            [traits[iv.var] for iv in block.iter_vars if axes is None or iv.var in axes],
            order[name],
        )
        for name, axes in used.items()
    )


def _axes(region: s_tir.BufferRegion) -> set[tirx.Var]:
    """The iterators one element access of ``region`` uses."""
    axes = set()
    for r in region.region:
        axes |= set(tirx.analysis.undefined_vars(r.min))
    return axes


def padded_columns(target: Target, dtype_bits: int, cols: int) -> int:
    """The columns the rule computes: ``cols``, or the next multiple of two vectors where no
    divisor of ``cols`` fills a vector (GPT-2's 50257 words, ViT's 197 tokens: declined, they
    fell to the convolution rule, and GPT-2's LM head took 90 % of its run)."""
    lanes = vector_lanes(target, dtype_bits)
    if cols < MIN_COLS or largest_divisor(cols, 2 * lanes) >= lanes:
        return cols
    return -(-cols // (2 * lanes)) * (2 * lanes)


def panel_width(target: Target, dtype_bits: int, cols: int) -> int | None:
    """``NR``, the columns of the rule's register tile (two vectors when they divide ``cols``),
    or ``None`` when the rule leaves the kernel alone (too few columns).

    One row (a batch-1 dense layer) is tiled too: ``1 x NR`` tiles over weights in panels
    stream them at memory speed (dlight's GEMV and reduction rules took 6-12x the time to stream
    them: ``benchmarks/cpu_kernels/gemv.py``)."""
    nr = largest_divisor(cols, 2 * vector_lanes(target, dtype_bits))
    if cols < MIN_COLS or nr < 2:
        return None
    return nr


def _columns_contiguous(
    sch: s_tir.Schedule,
    main: s_tir.schedule.SBlockRV,
    reindex_b: s_tir.schedule.SBlockRV,
    nr: int,
) -> bool:
    """Whether ``B`` (with its producers inlined) is read with the column ``j`` innermost, or
    ``j % NR`` innermost (weights ``PackConstantWeights`` laid out in panels at compile time).

    Then the tile's loads are already contiguous vectors and packing would only add a pass over
    ``B`` per call.
    """
    probe = sch.copy()
    probe.compute_inline(reindex_b)
    inline_producers(probe, main)
    block = probe.get(main)
    j = block.iter_vars[2].var
    uses_j = [read for read in block.reads if any(_uses(r.min, j) for r in read.region)]
    return bool(uses_j) and all(_is_column(read.region[-1].min, j, nr) for read in uses_j)


def _is_column(index: tirx.PrimExpr, j: tirx.Var, nr: int) -> bool:
    if index.same_as(j):
        return True
    return (
        isinstance(index, tirx.FloorMod) and index.a.same_as(j)
        and isinstance(index.b, tirx.IntImm) and int(index.b) == nr
    )  # fmt: skip


def _uses(expr: tirx.PrimExpr, var: tirx.Var) -> bool:
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def _plain_indices(block: s_tir.SBlock) -> bool:
    """Whether every read index is a bare iterator, a constant, or an iterator split by a
    constant (``j // NR``, ``j % NR``: weights in panels), i.e. no windows and no strides."""
    return all(_plain(r.min) and int(r.extent) == 1 for read in block.reads for r in read.region)


def _plain(index: tirx.PrimExpr) -> bool:
    if isinstance(index, tirx.Var | tirx.IntImm):
        return True
    return (
        isinstance(index, tirx.FloorDiv | tirx.FloorMod)
        and isinstance(index.a, tirx.Var) and isinstance(index.b, tirx.IntImm)
    )  # fmt: skip
