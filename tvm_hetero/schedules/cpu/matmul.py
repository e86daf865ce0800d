"""Matmul, dense and batch matmul on CPUs: packed weights, register tiles, parallel panels."""

from __future__ import annotations

import math

from tvm import DataType, s_tir, tirx
from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks
from tvm.sym.analyzer import Analyzer
from tvm.target import Target

from tvm_hetero.ir.attrs import COLUMNS_ATTR
from tvm_hetero.schedules.cpu.common import (
    PARALLEL_MIN_FLOPS,
    CpuRule,
    accumulate_in_registers,
    const_extents,
    cpu_cores,
    inline_producers,
    is_int,
    largest_divisor,
    output_bits,
    split_first,
    uses_var,
    vector_bits,
    vector_lanes,
)
from tvm_hetero.schedules.cpu.gemm_form import drop_unit_reductions, gemm_form

ROWS_PER_TILE = 4
"""Rows of the register tile (MR) with 16 vector registers (AVX2): MR x NR accumulators stay in
vector registers. Rows are padded to a multiple of it (:func:`padded_row_count`)."""
WIDE_ROWS_PER_TILE = 8
"""The most rows of a tile with 32 vector registers (AVX-512; MR is the largest divisor of the
rows up to it, as up to ``ROWS_PER_TILE`` with 16): 8 x 2 accumulators keep both
FMA units busy (4 x 2 left a 1x1 convolution of 960 -> 160 channels over 32 x 32 at 1.5x ONNX
Runtime's time, 8 x 2 at 1.0x: ``benchmarks/cpu_kernels/pointwise.py``)."""
WIDEST_ROWS_PER_TILE = 12
"""The rows of a tile with 32 vector registers where they divide the rows (:func:`tile_rows`)."""
TALL_ROWS_PER_TILE = 14
"""The most rows of a tile with 32 vector registers where no tile of ``ROWS_PER_TILE`` to
``WIDE_ROWS_PER_TILE`` rows divides the rows (:func:`tall_rows`): 14 x 2 accumulators, two
vectors of ``B`` and a broadcast are 31 registers."""
TALL_ROW_TILES = True
"""Whether rows that only a tile of 9 to 14 rows divides take it (:func:`tall_rows`)."""
BLOCK_BYTES = 16 * 1024
"""The most bytes of ``B`` a row tile sweeps across several panels (half of a 32 KiB L1)."""
L2_BLOCK_BYTES = 256 * 1024
"""The most bytes of ``B`` a row tile sweeps where no block of panels fits ``BLOCK_BYTES``: a
quarter of a 1 MiB L2 (half of Zen 3's 512 KiB)."""
MAX_PANELS_PER_BLOCK, MIN_BLOCKS, MIN_PANELS_FIT = 8, 16, 4
"""A block spans at most 8 panels, the columns keep at least 16 blocks for the threads, and
blocks are made only where 4 panels fit (in ``BLOCK_BYTES``: panels of 4 KiB or less, 32 input
channels with AVX-512; else in ``L2_BLOCK_BYTES``: 64 KiB or less, 512 rows)."""
MIN_COLS = 8
"""Below this many output columns the rule leaves the kernel to dlight's GEMV or the fallback."""
CACHE_WAY_BYTES, CACHE_WAYS, CACHE_LINE_BYTES = 64 * 1024, 8, 64
"""The L2 the panel copy assumes: 512 KiB in 8 ways of 64-byte lines (Zen 3). Larger L2s (Zen 4,
Sapphire Rapids) have at least as many lines for each set a stride reaches."""


class Matmul(CpuRule):
    """``C[b, i, j] += A[b, i, k] * B[b, j, k]`` in any layout, with fused epilogues.

    The kernel is read as a matmul by :func:`~tvm_hetero.schedules.cpu.gemm_form.gemm_form`
    (batch-1 rows and 1x1 convolutions included) and normalized to ``[batch, I, J, K]``
    (``reindex``). Where consecutive columns of ``B`` are not consecutive in memory it is packed
    per call into panels ``[batch, J / NR, K, NR]`` so the innermost
    loop reads it contiguously; each ``MR x NR`` output tile accumulates in registers over the
    whole ``K`` (``cache_write`` to ``local``; a small map's 1x1 convolution over a deep panel in
    blocks of ``K``, :func:`depth_block`), ``NR`` is vectorized and ``MR`` unrolled, and the
    ``(batch, J / NR)`` panels are the parallel loop (``B``'s panel stays in L2 across ``I``;
    a panel too large for that is summed in blocks of ``K``, :func:`deep_panels`; an image
    read in place by many channels in blocks of them over a band a thread, :func:`image_streams`;
    one read in place whose rows would evict each other from their few cache sets is copied
    into a buffer of its own first, :func:`_copy_panel`). ``MR`` is up to 8 rows with AVX-512's
    32 vector registers, up to 4 with AVX2's 16 (:func:`rows_per_tile`).
    Element-wise epilogues (bias, activation) are folded into the tile's write-back. Columns no
    whole vector divides and rows no tile divides are padded (``pad_einsum``: zero columns of
    ``B`` and rows of ``A``, computed and dropped).
    """

    name = "matmul"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        reductions = get_reduction_blocks(sch, blocks)
        if not reductions:
            return None
        main = reductions[0]
        drop_unit_reductions(sch, main)  # a 1x1 convolution's window (y + ry, ry < 1) is y
        named = _named_columns(func)  # the weights as B: the tile is its output's transpose
        form = gemm_form(sch.get(main), named)
        if form is None:
            return None  # a convolution's window indices (y + ry) belong to the Conv rule
        reindex_a = sch.reindex(main, ("read", form.a))
        reindex_b = sch.reindex(main, ("read", form.b))
        reindex_c = sch.reindex(main, ("write", 0))
        sch.transform_layout(reindex_a, ("write", 0), form.a_map)
        sch.transform_layout(reindex_b, ("write", 0), form.b_map)
        sch.transform_layout(reindex_c, ("read", 0), form.c_map)
        sch.transform_block_layout(main, form.block_map)

        extents = const_extents(sch, sch.get_loops(main))
        if extents is None:
            return _symbolic_rows(sch, main, (reindex_a, reindex_b), target)
        batches, rows, cols, depth = extents
        parallel = batches * rows * cols * depth >= PARALLEL_MIN_FLOPS
        bits = output_bits(sch, main)
        pack, a_pad = reindex_b, None
        most = rows_per_tile(target)
        padded_rows, padded = padded_row_count(rows, most), padded_columns(target, bits, cols)
        whole_columns = cols
        if (padded_rows, padded) != (rows, cols):  # whole tiles: A's pad rows and B's pad
            row_factor = ROWS_PER_TILE if padded_rows != rows else 1  # columns are zeros, C's
            col_factor = 2 * vector_lanes(target, bits) if padded != cols else 1  # are dropped
            sch.pad_einsum(main, [1, row_factor, col_factor, 1])
            if padded != cols:
                pack, cols = sch.get_consumers(reindex_b)[0], padded
            if padded_rows != rows:
                a_pad, rows = sch.get_consumers(reindex_a)[0], padded_rows
        nr = panel_width(target, bits, cols)
        if nr is None:
            return None
        mr = tile_rows(target, rows, transposed=named is not None)

        sch.compute_inline(reindex_a)
        keep = () if a_pad is None else (sch.get(a_pad).name_hint,)
        columns = _column_reads(sch, main, reindex_b, nr) if pack.same_as(reindex_b) else None
        if columns is not None:
            inline_producers(sch, main, keep=keep)
        else:  # B packed into NR-wide panels, K-major inside a panel
            sch.transform_layout(pack, ("write", 0), lambda b, j, k: (b, j // nr, k, j % nr))
            inline_producers(sch, pack)
            inline_producers(sch, main, keep=(*keep, sch.get(pack).name_hint))
            if not _pack_in_vectors(sch, pack, nr, whole_columns // nr, parallel):
                self._schedule_pack(sch, pack, parallel)
        if a_pad is not None:
            self._schedule_pack(sch, a_pad, parallel)

        copy = columns == STRIDED and rows > mr and _panel_evicts_itself(sch, main, depth)
        panel_bytes = depth * nr * bits // 8
        a_bytes, c_bytes = rows * depth * bits // 8, rows * cols * bits // 8
        b_bytes = depth * cols * bits // 8
        packed = columns != STRIDED
        per_block = (
            1 if copy else panels_per_block(cols // nr, panel_bytes, packed, a_bytes, c_bytes)
        )
        deep, streams = None, None
        if packed and not copy and named is None:
            deep = deep_panels(depth, panel_bytes, rows, mr, cols // nr, cpu_cores(target))
        elif batches == 1 and named is None and not packed and not copy and parallel:
            streams = image_streams(depth, rows, cols // nr, nr * bits // 8, cpu_cores(target))
        if deep is not None:
            return _deep_panels(sch, main, (mr, nr), deep, parallel, target)
        if streams is not None:
            return _deep_panels(sch, main, (mr, nr), streams, parallel, target, panels_outer=True)
        batch, i, j, k = sch.get_loops(main)
        j0, j1 = sch.split(j, [None, nr])
        i0, i1 = sch.split(i, [None, mr])
        tile = i0
        if per_block > 1:  # a row tile writes `per_block` panels' columns before the next one
            j0, tile = sch.split(j0, [None, per_block])
            sch.reorder(batch, j0, i0, tile, k, i1, j1)
        else:
            sch.reorder(batch, j0, i0, k, i1, j1)
        tasks = batches * cols // nr // per_block
        groups, banded = 1, False
        if parallel and not copy:
            cores = cpu_cores(target)
            laid_out = columns == PANELS and named is None and per_block == 1
            banded = token_bands_apply(
                batches, rows // mr, cores, b_bytes, laid_out
            ) and _rows_in_runs(sch, main)
            if banded:
                # whole bands only where the columns are cropped (an epilogue's strided slice
                # after PadMatmulColumns, or this rule's own padding): TVM's
                # reverse_compute_inline of the crop into the tile's write-back replaced the
                # predicate that kept an uneven last band within the rows with the columns'
                # own, and that band wrote rows past the output (VOLO's 64 -> 486 over
                # 14 x 14, 49 row tiles in two bands: the heap corrupted); row_groups and
                # one_panel_bands cut into divisors of the row tiles already
                even = (rows // mr) % cores == 0
                groups = cores if even or not crops_columns(func, cols, whole_columns) else 1
                banded = groups > 1
            elif named is not None and position_bands_apply(rows // mr, cores, b_bytes):
                groups, banded = cores, True  # bands of the map's positions
            else:
                groups = row_groups(tasks, rows // mr, cores)
                if groups == 1:
                    groups = one_panel_bands(tasks, rows // mr, cores, a_bytes, b_bytes)
        following = 1  # a thread's tasks of one panel before its next panel's
        if groups > 1:  # the threads share each panel's row tiles too
            group, i0 = sch.split(i0, [groups, None])
            tile = i0 if per_block == 1 else tile
            if banded or split_first(a_bytes, b_bytes):  # each thread a band of A's rows
                sch.reorder(group, j0)
                panel = sch.fuse(batch, group, j0)
            else:
                panel, following = sch.fuse(batch, j0, group), groups
        else:
            panel = sch.fuse(batch, j0)
        in_place = per_block == 1 and not copy and named is not None
        block = depth_block(depth, panel_bytes, rows // mr // groups) if in_place else None
        depth_outer = None
        if block is not None:
            depth_outer, k = sch.split(k, [None, block])
            sch.reorder(depth_outer, i0)  # a block of the panel stays in L1 over the row tiles
        if parallel:
            sch.parallel(panel)
        if copy:
            _copy_panel(sch, main, panel)
        sch.unroll(i1)
        sch.vectorize(j1)
        if depth_outer is None:
            k = _in_steps(sch, main, k, depth, named is not None)
            acc = accumulate_in_registers(sch, main, tile, k, target)
        else:  # the panel's partial sums in a local buffer, written back after the last block
            acc = accumulate_in_registers(sch, main, panel, depth_outer, target)
        if named is not None and mr > 1:
            write_by_position(sch, acc, mr)
        if depth_outer is not None:
            sch.annotate(i0, PREFETCH_ANNOTATION, [named, block])
        elif (
            NEXT_PANELS
            and parallel
            and per_block == 1
            and batches == 1
            and rows > 1
            and (groups == 1 or (NEXT_PANELS_IN_BANDS if following == 1 else NEXT_PANELS_IN_GROUPS))
            and columns == PANELS
        ):
            weights = _laid_out_panels(sch, main, func, depth, nr)
            if weights is not None:
                sch.annotate(i0, NEXT_PANEL_ANNOTATION, [weights, following])
        return sch

    @staticmethod
    def _schedule_pack(sch: s_tir.Schedule, block, parallel: bool) -> None:
        loops = sch.get_loops(block)
        if parallel and len(loops) >= 2:
            sch.parallel(sch.fuse(*loops[:2]))


def write_by_position(sch: s_tir.Schedule, acc: s_tir.schedule.SBlockRV, mr: int) -> None:
    """Write a tile that ``acc`` writes back transposed (its rows are the output's columns: a
    1x1 convolution over a small map with its weights as the columns,
    :func:`weights_as_columns`) one output channel at a time, a vector of its ``mr``
    consecutive positions each, instead of one position at a time, its channels' vector
    scattered a map apart (one scalar extract and store a channel: 224 for a 7 x 32 tile). The
    tile's columns are unrolled; where the write-back covers more rows than a tile (the
    panel's partial sums, :func:`depth_block`), they are cut in tiles of ``mr`` first. The
    epilogue is computed in those vectors too: a swish takes 32 vectors of 7 lanes a 7 x 32
    tile where it took 14 of 16, which costs what the contiguous stores save. Beside ONNX
    Runtime (Intel Xeon, family 6 model 207, two threads, interleaved,
    ``benchmarks/cpu_kernels/transposed_writes.py``): four of MobileNet-V2's 1x1 pairs
    96 -> 576 -> 96 over 14 x 14 with their residual adds 1.21 -> 1.02 ms (ONNX Runtime 0.73),
    160 -> 960 -> 160 over 7 x 7 1.18 -> 1.10 (1.08), with a swish 1.01 -> 1.02 (0.75); whole
    models (``before_and_now.py``): EfficientNet-B0 1.66 -> 1.38x ONNX Runtime's time,
    MobileNet-V2 1.40 -> 1.36x, RegNet-X-400MF 1.58 -> 1.52x, MnasNet 1.60 -> 1.58x."""
    loops = sch.get_loops(acc)
    i, j = loops[-2], loops[-1]
    if sch.get(i).extent.value > mr:
        i = sch.split(i, [None, mr])[1]
    sch.reorder(j, i)
    sch.unroll(j)
    sch.vectorize(i)


def _named_columns(func: tirx.PrimFunc) -> str | None:
    """The name of the parameter ``func``'s :data:`COLUMNS_ATTR` takes as ``B``, if any."""
    index = func.attrs.get(COLUMNS_ATTR) if func.attrs else None
    return None if index is None else str(func.params[int(index)].name)


def _pack_in_vectors(sch: s_tir.Schedule, pack, nr: int, whole: int, parallel: bool) -> bool:
    """Pack ``B`` into its padded panels a panel at a time, ``NR`` consecutive columns of a row
    ``k`` read and written as one vector (``b, j0, k, j1``), the panels in parallel and the last
    (the padding's) apart; False where the pack is not one batch of ``(j, k)`` loops or does
    not read consecutive columns at consecutive addresses (``B`` stored ``[j, k]``: packed as
    before, ``k`` innermost). Packed column by column every element of an image was a strided
    read and a strided write with a division: a 1x1 convolution of 128 -> 16 channels over 55
    x 55 took 5x the time of the same over 56 x 54, 2.5x with this (Zen 4, two threads)."""
    loops = sch.get_loops(pack)
    extents = const_extents(sch, loops)
    if extents is None or len(loops) != 3 or extents[0] != 1:
        return False
    block = sch.get(pack)
    if len(block.reads) != 1 or _column_kind(block.reads[0], block.iter_vars[1].var, nr) != STRIDED:
        return False  # (two reads: a producer folded into the pack)
    batch, j, k = loops
    j0, j1 = sch.split(j, [None, nr])
    sch.reorder(batch, j0, k, j1)
    sch.vectorize(j1)
    if 0 < whole < extents[1] // nr:
        j0 = sch.loop_partition(j0, [whole, None])[0]
    if parallel:
        sch.parallel(j0)
    return True


A_CACHED_BYTES = 1024 * 1024
"""The most bytes of ``A`` (one batch's rows) the rule lets every panel read again: above it
``A`` comes from beyond L2 for each panel, and row tiles sweep blocks of packed panels that
fit :data:`WIDE_A_BLOCK_BYTES` instead (:func:`panels_per_block`)."""
WIDE_A_BLOCK_BYTES = 512 * 1024
"""The most bytes of ``B``'s packed panels a row tile sweeps where ``A`` is larger than
:data:`A_CACHED_BYTES`: half of Zen 4's 1 MiB L2, a quarter of Sapphire Rapids' 2 MiB."""


C_CACHED_BYTES = 1024 * 1024
"""The most bytes of a batch's output a panel at a time may write (:func:`panels_per_block`):
beyond them the output is not in L2, and each of a row tile's rows is written a panel's
columns at a time, a row apart."""


def panels_per_block(
    panels: int, panel_bytes: int, packed: bool = True, a_bytes: int = 0, c_bytes: int = 0
) -> int:
    """How many ``NR``-wide panels one row tile computes before the next row tile: 1, or where
    at least :data:`MIN_PANELS_FIT` panels of ``B`` fit in :data:`BLOCK_BYTES` (L1: a 1x1
    convolution of few input channels over a large map) or else, where ``B`` is ``packed`` in
    panels, in :data:`L2_BLOCK_BYTES` (a wide output over a short ``K``: a decoder's
    vocabulary; with an image read in place, its rows a stride apart, MobileNet-V2 ran 1.5x
    slower in one run), as many as fit (up to :data:`MAX_PANELS_PER_BLOCK`, a divisor of
    ``panels`` that leaves :data:`MIN_BLOCKS` blocks; a panel the rule copies stays alone).
    With one panel a block each row of a tile was written 128 bytes at a time, a hundred rows
    apart: MobileNet-V2's 16 -> 96 over 112 x 112, its output not in cache, took 1.5-2x the
    time it takes in blocks of 8 panels (``benchmarks/cpu_kernels/pointwise_layers.py
    blocks``); a 128 x 256 by 256 x 8000 matmul, its 4 MB output not in L2, took 3.09 ms in
    panels alone and 2.93 in blocks of 5, ONNX Runtime 2.74 (``wide_outputs.py``).

    Where ``A`` (``a_bytes``, one batch's rows) is over :data:`A_CACHED_BYTES`, each panel
    read it again from L3 or memory: packed panels are taken in blocks that fit
    :data:`WIDE_A_BLOCK_BYTES`, with no floor on the blocks (the threads share a block's row
    tiles, :func:`row_groups`), so ``A`` is read once a block. Each end to end beside ONNX
    Runtime, two runs (Intel Xeon Emerald Rapids, 2 threads): SegFormer's 16384 x 32 by
    32 x 128 1.64-1.65x -> 1.14-1.17x its time, SqueezeNet's 1x1 of 512 -> 1000 over 13 x 13
    (the weights as ``A``) 1.39-1.47x -> 1.22-1.28x, Whisper's 1500 x 256 by 256 x 1536
    1.26-1.30x -> 1.18-1.21x.

    Where a batch's output (``c_bytes``) is over :data:`C_CACHED_BYTES` and all of its packed
    panels fit :data:`WIDE_A_BLOCK_BYTES`, a row tile sweeps every panel: its rows are written
    whole, one after the other. Attention's scores over Whisper's 1,500 frames (6 heads, 1500 x
    64 by 64 x 1500, 47 panels: a prime, so no smaller block divided them, and 47 panels leave
    fewer than 16 blocks) took 14.7 ms a panel at a time, 10.8 ms so, ONNX Runtime 10.2 (AMD
    EPYC Zen 4, two threads, the kernel alone in 9 interleaved rounds)."""
    if packed and a_bytes > A_CACHED_BYTES:
        fit = min(MAX_PANELS_PER_BLOCK, WIDE_A_BLOCK_BYTES // max(panel_bytes, 1), panels)
        if fit >= 2:
            return largest_divisor(panels, fit)
    if packed and c_bytes > C_CACHED_BYTES and panels * panel_bytes <= WIDE_A_BLOCK_BYTES:
        return panels
    for block_bytes in (BLOCK_BYTES, L2_BLOCK_BYTES) if packed else (BLOCK_BYTES,):
        fit = min(MAX_PANELS_PER_BLOCK, block_bytes // max(panel_bytes, 1), panels // MIN_BLOCKS)
        if fit >= MIN_PANELS_FIT:
            return largest_divisor(panels, fit)
    return 1


PREFETCH_ANNOTATION = "tvm_hetero.prefetch_panel_block"
"""The rule's mark on the row-tile loop of a panel summed in blocks of its depth
(:func:`depth_block`): ``[the packed weights' name, the block's depth]``, for
:class:`~tvm_hetero.passes.PrefetchPanelBlocks`, which asks for the next block there."""

NEXT_PANEL_ANNOTATION = "tvm_hetero.prefetch_next_panel"
"""The rule's mark on the row-tile loop of a panel of weights laid out at compile time (no
blocks of its depth) where a thread's tasks go from one panel to the next (one panel a task, a
band of rows over every panel in turn, or a panel's groups of row tiles one after another,
:func:`row_groups`): ``[the weights' name, the groups of a panel's row tiles that follow each
other]``, for :class:`~tvm_hetero.passes.PrefetchNextPanels`, which asks for the next panel
while the row tiles sum this one. Turn by turn (``paired_replay.py``, Intel Xeon, two
threads): ConvNeXt-T 0.953, BERT 0.969, the mobile networks level; with bands, LeViT-128S
0.909, MobileBERT 0.913, Qwen2 (4 layers of 256) 0.933, DeiT-tiny 0.952, MobileViT-XS,
EfficientFormer-L1, HGNetV2-B0 and DenseNet-121 level; with groups (AMD EPYC Zen 4),
RegNet-X-400MF 0.943 (its 400 -> 400 over 7 x 7, 13 panels of 7 row tiles in 7 groups), ten
other CNNs and transformers level."""
NEXT_PANELS = True
"""Whether the rule marks such loops (:data:`NEXT_PANEL_ANNOTATION`); False to compare."""
NEXT_PANELS_IN_BANDS = True
"""Whether the threads' bands of rows (:func:`token_bands_apply`, :func:`position_bands_apply`,
:func:`~tvm_hetero.schedules.cpu.common.split_first`), each over every panel in turn, are
marked too."""
NEXT_PANELS_IN_GROUPS = True
"""Whether a panel's groups of row tiles (:func:`row_groups`), which a thread takes one after
another before the next panel's, are marked too (the lines asked for spread over the groups)."""

DEPTH_BLOCK_BYTES = 16 * 1024
"""The most bytes of a packed panel of ``B`` a block of the reduction spans where the rule's
``A`` is a small map's image read in place, its weights the columns (:func:`depth_block`)."""
MIN_DEPTH_BLOCK = 32
"""The fewest rows ``k`` a block of the reduction takes (:func:`depth_block`)."""


def depth_block(depth: int, panel_bytes: int, row_tiles: int) -> int | None:
    """Rows ``k`` of a packed panel of ``panel_bytes`` (``depth`` rows) a block of the
    reduction takes, or ``None`` for none, where a 1x1 convolution over a small map takes its
    weights as the columns (:func:`weights_as_columns`): a panel over
    :data:`DEPTH_BLOCK_BYTES` read by two row tiles or more is cut in blocks of at most that,
    each outside the row tiles, so a block stays in L1 over them; the panel's partial sums stay
    in a local buffer between blocks. Whole, a panel (1024 input channels: 128 KiB) streamed
    from L2 or beyond for every tile of 7 positions, with a new line of the image for every
    ``k``. Inside whole models, the same rounds (Intel Xeon, family 6 model 207, two threads,
    ``benchmarks/models/before_and_now.py``): ResNet-50 1.36 -> 1.31x ONNX Runtime's time,
    ResNeXt-50 1.35 -> 1.28x, MobileNet-V2 1.43 -> 1.39x, MnasNet 1.66 -> 1.62x; a chain of
    eight of ResNet-50's 1024 -> 256 -> 1024 pairs over 14 x 14 1.97 -> 1.73x. Matmuls over
    rows in memory (a transformer's ``x @ W``) read ``A``'s rows in runs and keep whole panels:
    197 x 3072 by 3072 x 768 ran 1.2x slower in blocks."""
    row_bytes = panel_bytes // depth
    if panel_bytes <= DEPTH_BLOCK_BYTES or row_tiles < 2:
        return None
    block = largest_divisor(depth, DEPTH_BLOCK_BYTES // row_bytes)
    return block if MIN_DEPTH_BLOCK <= block < depth else None


DEPTH_STEPS = 4
"""Rows ``k`` of the depth each pass of a register tile's depth loop takes, unrolled, where
``A``'s rows are read in runs of the depth (:func:`_in_steps`)."""


NAMED_DEPTH_STEPS = True
"""Whether a 1x1 convolution over a small map with its weights as the columns
(:func:`weights_as_columns`), its depth not in blocks (:func:`depth_block`), takes
:data:`DEPTH_STEPS` rows a pass too (:func:`_in_steps`): its tile's rows are positions, a run
of them a channel. Alone, MobileNet-V2's 960 -> 160 over 7 x 7 41.7 -> 36.1 us; whole models
(``before_and_now.py``) ResNet-50 25.6 -> 25.0 ms, RegNet-X 3.90 -> 3.85, the others within
a percent (Intel Xeon, two threads)."""


def _in_steps(
    sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV, k, depth: int, named: bool = False
):
    """The depth loop ``k`` (``depth`` rows) of a register tile cut so that each pass takes
    :data:`DEPTH_STEPS` rows, unrolled, where that divides ``depth`` and ``main`` reads ``A``'s
    rows in runs (:func:`_rows_in_runs`); the outer loop (``k`` itself otherwise). Each pass
    of one row had loaded its tile's broadcasts and ``B``'s vectors, multiplied and counted
    the loop alone; four a pass give LLVM four rows' loads to schedule ahead of the
    multiply-adds. Alone (Intel Xeon, two threads): 197 x 768 by 768 x 3072 2.38 -> 2.23 ms,
    197 x 3072 by 3072 x 768 2.54 -> 2.35, 128 x 768 by 768 x 768 0.37 -> 0.33 (eight rows a
    pass as four); whole transformers 2-9 % faster (``before_and_now.py``: BERT 0.98 -> 0.90x
    ONNX Runtime's time, ViT-B 1.06 -> 1.01x). A 1x1 convolution's image, its depth the
    channels a map apart, stays at one row a pass: MobileNet-V2's 144 -> 24 over 56 x 56 ran
    slower four a pass (0.053 -> 0.058 ms, its image not in cache 0.10 -> 0.14)."""
    along = (named and NAMED_DEPTH_STEPS) or _rows_in_runs(sch, main)
    if DEPTH_STEPS < 2 or depth % DEPTH_STEPS or not along:
        return k
    outer, inner = sch.split(k, [None, DEPTH_STEPS])
    sch.unroll(inner)
    return outer


def _rows_in_runs(sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV) -> bool:
    """Whether ``main`` (``[batch, I, J, K]``) reads an operand along the depth: a read whose
    innermost index moves with ``k`` (``A``'s rows in a transformer's ``x @ W``). A 1x1
    convolution reads its image a map apart for each ``k`` and its weights through their
    window's axes (innermost ``kw``): it has none."""
    block = sch.get(main)
    k = block.iter_vars[3].var
    return any(uses_var(read.region[-1].min, k) for read in block.reads)


DEEP_PANELS = True
"""Whether a packed panel too deep to stay in L2 over its row tiles is summed in blocks of its
depth (:func:`deep_panels`)."""
DEEP_PANEL_BYTES = 384 * 1024
"""The largest packed panel of ``B`` the rule reads whole for each row tile: BERT's 3072 ->
768 (384 KiB panels with AVX-512) ran the same either way, ALBERT's 4096 -> 16384 (512 KiB)
a twentieth faster in blocks."""
DEEP_BLOCK_BYTES = 32 * 1024
"""The bytes of one panel a block of the depth spans (:func:`deep_panels`): 256 rows of 32
columns (16, 64 and 32 KiB took 53.6, 52.8 and 52.6 ms on ALBERT's 16384 -> 4096)."""
DEEP_PANELS_BYTES = 256 * 1024
"""The most bytes of packed panels one block of the depth spans over a task's panels (128,
256, 512 KiB and 1 MiB: 54.3, 52.6, 55.4 and 59.0 ms on ALBERT's 16384 -> 4096)."""
DEEP_SUMS_BYTES = 128 * 1024
"""The most bytes of partial sums a task keeps (its rows by its panels' columns): with more
rows than that holds a panel at a time, whole panels ran faster (1500 x 5120 by 5120 x 1280
46.4 ms whole, 49.4 in blocks of 8 panels, 55.9 of one); at 512 rows (two panels a task)
15.8 whole and 16.1 in blocks, at 256 and 197 rows level."""


def deep_panels(
    depth: int, panel_bytes: int, rows: int, mr: int, panels: int, cores: int
) -> tuple[int, int] | None:
    """``(rows k a block, panels a task)`` where a packed panel (``panel_bytes``, ``depth``
    rows) is larger than :data:`DEEP_PANEL_BYTES` and two row tiles of ``mr`` rows or more
    read it, else ``None``; the panels a task are the most whose blocks fit
    :data:`DEEP_PANELS_BYTES` and whose partial sums over ``rows`` fit
    :data:`DEEP_SUMS_BYTES` that leave ``cores`` threads even (:func:`busiest_share`), and
    ``None`` where not one panel's sums fit or no block of :data:`MIN_DEPTH_BLOCK` rows or
    more divides the depth. Read whole, such a panel left L2 before the next
    row tile read it again: ALBERT's 128 x 16384 by 16384 x 4096 (2 MiB panels, AVX-512) took
    95 ms alone, 52.6 in blocks, ONNX Runtime's in its model 53 (Intel Xeon, two threads;
    benchmarks: panels too deep for L2)."""
    if not DEEP_PANELS or panel_bytes <= DEEP_PANEL_BYTES or rows < 2 * mr:
        return None
    row_bytes = panel_bytes // depth  # of one row k of a panel; a row of its sums as many
    block = largest_divisor(depth, DEEP_BLOCK_BYTES // row_bytes)
    most = min(DEEP_PANELS_BYTES // (block * row_bytes), DEEP_SUMS_BYTES // (rows * row_bytes))
    if block < MIN_DEPTH_BLOCK or most < 1:
        return None
    fit = largest_divisor(panels, most)
    while fit > 1 and busiest_share(panels // fit, cores) > MAX_IMBALANCE:
        fit = largest_divisor(panels, fit - 1)
    return block, fit


IMAGE_STREAMS = True
"""Whether an image read in place by more rows ``k`` than the cache's prefetcher follows is
summed in blocks of its depth over long bands of its positions (:func:`image_streams`)."""
STREAM_ROWS = 16
"""The rows ``k`` (channels of an image read in place) a block of the depth takes
(:func:`image_streams`): 8, 16, 24, 32 and 48 took 83, 69, 71, 72 and 104 us for MobileNet-V2's
144 -> 24 over 56 x 56 with its image not in cache (Intel Xeon, two threads)."""
STREAM_IMAGE_BYTES = 1024 * 1024
"""The smallest image read in blocks of channels (:func:`image_streams`): a smaller one stays
in L2 between layers, and blocks only cost (EfficientNet-B0's 240 -> 40 over 28 x 28, 735 KiB,
45 -> 52 us with it in cache, 64 -> 74 without)."""
STREAM_SUMS_BYTES = 256 * 1024
"""The most bytes of partial sums a task keeps over a band of an image (:func:`image_streams`)."""


def image_streams(
    depth: int, rows: int, panels: int, panel_row_bytes: int, cores: int
) -> tuple[int, int] | None:
    """``(rows k a block, panels a task)`` for an image read in place as ``B`` (a 1x1
    convolution over a large map: rows ``k`` its channels, a map apart), or ``None``.

    Panel by panel, each tile of 32 positions reads one line of each of the ``depth`` channels:
    as many streams as channels, more than the L2 prefetcher follows, so each line came at the
    latency of the last level or memory once the image had left L2 (as in a model, where the
    layer before wrote it). Summed in blocks of :data:`STREAM_ROWS` channels over one band of
    positions a thread, each block reads that many long runs, which the prefetcher follows;
    the band's partial sums (``rows`` by its columns, at most :data:`STREAM_SUMS_BYTES`) stay
    in a local buffer between blocks. Alone, its image not in cache (Intel Xeon, two threads):
    MobileNet-V2's 144 -> 24 over 56 x 56 105 -> 69 us, 96 -> 24 85 -> 46; with its image
    in cache 52 -> 61 and 36 -> 41. ``None`` where the depth is no deeper than two blocks,
    the image (``depth`` by the panels' rows of ``panel_row_bytes``) is under
    :data:`STREAM_IMAGE_BYTES`, no block of 8 rows or more divides the depth, the panels do not
    fall evenly in one band a thread, or the band's sums do not fit."""
    image_bytes = depth * panels * panel_row_bytes
    if not IMAGE_STREAMS or depth <= 2 * STREAM_ROWS or image_bytes < STREAM_IMAGE_BYTES:
        return None
    if panels % cores:  # a band of its own a thread
        return None
    block, fit = largest_divisor(depth, STREAM_ROWS), panels // cores
    if block < STREAM_ROWS // 2 or rows * fit * panel_row_bytes > STREAM_SUMS_BYTES:
        return None
    return block, fit


def _deep_panels(
    sch, main, tile: tuple, deep: tuple, parallel: bool, target, panels_outer: bool = False
) -> s_tir.Schedule:
    """Sum each task's ``fit`` panels in blocks of ``block`` rows of the depth (``deep``,
    :func:`deep_panels`): loops ``(batch, task, depth block, row tile, panel, k, MR, NR)``, so
    a block of the task's panels stays in L2 over the row tiles and a row tile's block of
    ``A`` in L1 over the panels. The task's partial sums are a local buffer (all rows by its
    panels' columns) that each ``MR x NR`` tile adds into: its addresses do not change over
    ``k``, so LLVM keeps the tile in registers over the block, loading and storing it once a
    block. The buffer is written back, with the epilogues, after the last block.
    ``panels_outer`` (an image's bands, :func:`image_streams`): loops ``(batch, task, depth
    block, panel, row tile, ...)``, so a block of a panel stays in L1 over the row tiles."""
    (mr, nr), (block, fit) = tile, deep
    batch, i, j, k = sch.get_loops(main)
    j0, j1 = sch.split(j, [None, nr])
    task, panel = sch.split(j0, [None, fit])
    i0, i1 = sch.split(i, [None, mr])
    k0, k1 = sch.split(k, [None, block])
    if panels_outer:  # a block of an image's panel stays in L1 over the row tiles
        sch.reorder(batch, task, k0, panel, i0, k1, i1, j1)
    else:
        sch.reorder(batch, task, k0, i0, panel, k1, i1, j1)
    outer = sch.fuse(batch, task)
    if parallel:
        sch.parallel(outer)
    sch.unroll(i1)
    sch.vectorize(j1)
    _in_steps(sch, main, k1, block)
    accumulate_in_registers(sch, main, outer, k0, target)
    return sch


MAX_IMBALANCE = 1.05
"""The most work the busiest thread may have over an even share before the rule cuts each
panel's row tiles into groups the threads share (:func:`row_groups`). At a tenth, RegNet-X's
1x1 convolutions of 400 channels over 7 x 7 (13 panels) ran seven panels on one thread and six
on the other; at a twentieth their row tiles are cut in seven groups (46 and 45 tasks). Each
model's kernels replayed in its order with this and with a tenth, turn by turn beside ONNX
Runtime (Intel Xeon, family 6 model 207, two threads, 150-200 turns,
``benchmarks/models/paired_replay.py``, whose floor, the same build twice, was half a
percent): RegNet-X-400MF, MnasNet and MobileNet-V2 a percent faster, EfficientNet-B0 and
ResNet-50 half a percent, MobileNetV4, HGNetV2 and DenseNet-121 level."""


def row_groups(tasks: int, row_tiles: int, cores: int) -> int:
    """Into how many groups each panel's ``row_tiles`` are cut so that ``tasks`` panels (or
    blocks of panels) keep ``cores`` threads evenly busy: 1 where the busiest thread has at
    most :data:`MAX_IMBALANCE` of an even share already (or ``cores`` is unknown), else the
    fewest groups, a divisor of ``row_tiles``, that bring it there (or the most even).

    A 1x1 convolution over a small map with its output channels as the columns has few
    panels: MnasNet's 576 -> 96 over 14 x 14 had three, two on one thread and one on the
    other, so one thread worked twice as long as the other; cut into two groups of row tiles,
    six tasks split three and three."""
    if cores <= 1 or busiest_share(tasks, cores) <= MAX_IMBALANCE:
        return 1
    divisors = [g for g in range(2, row_tiles + 1) if row_tiles % g == 0]
    fit = [g for g in divisors if busiest_share(tasks * g, cores) <= MAX_IMBALANCE]
    if fit:
        return fit[0]
    return min(divisors, key=lambda g: (busiest_share(tasks * g, cores), g), default=1)


TOKEN_BANDS = True
"""Whether a matmul over rows in memory with small weights gives each thread a band of rows
(:func:`token_bands_apply`)."""
TOKEN_BANDS_BYTES = 768 * 1024
"""The most bytes of ``B`` each thread reads whole where the threads take bands of rows
(:func:`token_bands_apply`): DeiT-tiny's 442 and 576 KiB weights ran faster so, BERT's 2.25
MiB and ViT-B's slower, T5's 1 MiB level."""


def token_bands_apply(
    batches: int, row_tiles: int, cores: int, b_bytes: int, laid_out: bool
) -> bool:
    """Whether the threads of a matmul whose ``A`` is read along its rows (a transformer's
    ``x @ W``, :func:`_rows_in_runs`) take a band of rows each, all panels in each, instead of
    panels over all rows: one batch, at least ``cores`` row tiles, ``B`` (``b_bytes``) at most
    :data:`TOKEN_BANDS_BYTES`, ``laid_out`` (weights in panels since compile time, read a
    panel at a time, not the weights-as-columns layout). Each thread then reads the rows its
    own core wrote (the row-parallel steps before it: a norm, the padding of ``A`` to whole
    tiles, the matmul before with its threads on bands too) and all of a ``B`` small enough
    for L2, not half of ``B`` and every row, half of them from the other core. DeiT-tiny's
    197 x 768 by 768 x 192, its rows padded to 200 by both threads, took 215 us in the model's
    order and 167 alone on panels; on bands 162 and 142 (ONNX Runtime's Gemm 150 in its model;
    Intel Xeon, two threads; ``benchmarks/models/kernels_inside.py``). Where it holds, the
    bands replace :func:`row_groups`' and :func:`one_panel_bands`' groups."""
    small = laid_out and b_bytes <= TOKEN_BANDS_BYTES
    return TOKEN_BANDS and batches == 1 and row_tiles >= cores > 1 and small


def crops_columns(func: tirx.PrimFunc, cols: int, whole_columns: int) -> bool:
    """Whether a matmul kernel of ``cols`` columns (``whole_columns`` before the rule padded
    them) writes fewer columns than it computes: the rule padded them, or the kernel's output
    (its last parameter) is narrower, a crop fused after it. DeiT-tiny's 197 rows make 25 tiles
    of 8 with AVX-512, which two bands of rows split unevenly; without a crop its bands write
    no row past the output, and the model ran about a tenth faster with them (benchmarks:
    bands of rows for small weights)."""
    if cols != whole_columns:
        return True
    shape = list(getattr(func.params[-1], "shape", None) or []) if func.params else []
    return not shape or not isinstance(shape[-1], tirx.IntImm) or int(shape[-1]) != cols


POSITION_BANDS = True
"""Whether a 1x1 convolution over a small map with its weights as the columns gives each thread
a band of positions over all its panels where its weights are small
(:func:`position_bands_apply`)."""


def position_bands_apply(row_tiles: int, cores: int, b_bytes: int) -> bool:
    """Whether the threads of a 1x1 convolution whose weights are the columns
    (:func:`weights_as_columns`: its rows are the map's positions) take a band of positions
    each, all panels in each, instead of panels over all positions: ``cores`` divide its
    ``row_tiles`` and its weights (``b_bytes``) are at most :data:`TOKEN_BANDS_BYTES`, as for
    :func:`token_bands_apply`. A thread had taken panels of output channels over every
    position and read the whole image, half of it from the other core's cache where the layers
    before wrote bands of positions (a 1x1 convolution like this one, a concatenation of such
    layers): HGNetV2's 160 -> 128 over 28 x 28, after a concatenation of four layers, took 192
    us in the model's order and 106 alone; in bands 127 and 112 (Intel Xeon, two threads;
    a replay of the model's kernel calls as ``benchmarks/models/kernels_inside.py`` makes). Where
    it holds, the bands replace :func:`row_groups`' and :func:`one_panel_bands`' groups. Larger
    weights, which each thread
    would then read whole (ResNeXt's 1024 -> 1024 over 14 x 14, 4 MiB), keep those."""
    small = b_bytes <= TOKEN_BANDS_BYTES
    return POSITION_BANDS and cores > 1 and row_tiles % cores == 0 and small


ONE_PANEL_BANDS = True
"""Whether :func:`one_panel_bands` cuts the row tiles where each thread has one panel."""


def one_panel_bands(tasks: int, row_tiles: int, cores: int, a_bytes: int, b_bytes: int) -> int:
    """Into how many groups each panel's ``row_tiles`` are cut where ``tasks`` panels give
    each of ``cores`` threads one (the threads even already, :func:`row_groups` cuts none):
    ``cores``, a band of rows each, where ``A`` outweighs ``B``
    (:func:`~tvm_hetero.schedules.cpu.common.split_first`) and the cores divide the row tiles;
    else 1. A thread had read the whole of ``A`` for its one panel: MobileNet-V2's 384 -> 64
    over 14 x 14 (two panels of 32 channels, its 301 KB image just written by both cores, a
    block of channels each) took 68-70 us in the model's order and 25 alone; in bands of rows
    47-48 (30 alone) (``benchmarks/models/kernels_inside.py``, Intel Xeon, family 6 model
    167, two threads)."""
    if not ONE_PANEL_BANDS or tasks != cores or row_tiles % cores:
        return 1
    return cores if split_first(a_bytes, b_bytes) else 1


def busiest_share(tasks: int, threads: int) -> float:
    """The busiest thread's work over an even share where a parallel loop of ``tasks`` equal
    tasks runs on ``threads`` (TVM hands each thread a block of them up front): 3 on 2, 4/3."""
    return -(-tasks // threads) * threads / tasks


def rows_per_tile(target: Target) -> int:
    """The most rows of a register tile on ``target``: :data:`WIDE_ROWS_PER_TILE` with AVX-512's
    32 vector registers, :data:`ROWS_PER_TILE` otherwise."""
    return WIDE_ROWS_PER_TILE if vector_bits(target) >= 512 else ROWS_PER_TILE


def tile_rows(target: Target, rows: int, transposed: bool = False) -> int:
    """``MR``, the rows of the rule's register tile: :data:`WIDEST_ROWS_PER_TILE` where it
    divides ``rows`` and the target has AVX-512's 32 vector registers (24 accumulators, 24
    multiply-adds for 14 loads where 8 rows make 16 for 10; MLAS's AVX-512 kernel takes 12
    rows too), else the largest divisor of ``rows`` up to :func:`rows_per_tile`. A tile
    written ``transposed`` (its rows are positions, :func:`write_by_position`) keeps the
    latter: its positions would be stored as vectors of 12 lanes.

    Each beside ONNX Runtime, interleaved (Intel Xeon, family 6 model 167, two threads,
    ``benchmarks/cpu_kernels/row_tiles.py``; whole models, ``before_and_now.py``): 1500 x 384
    by 384 x 1536 5.64 -> 5.27 ms (ONNX Runtime 5.30), 192 x 768 by 768 x 3072 3.08 -> 2.86
    (2.68); Whisper's encoder (1,500 frames: 6 rows before) 1.05x -> 1.01x ONNX Runtime's
    time (1.08x -> 0.99x in an earlier run); MobileNet-V2, EfficientNet-B0, BERT (128 rows: 8
    either way) and DeiT level."""
    most = rows_per_tile(target)
    if not transposed and most >= WIDE_ROWS_PER_TILE and rows % WIDEST_ROWS_PER_TILE == 0:
        return WIDEST_ROWS_PER_TILE
    return tall_rows(rows, most) or largest_divisor(rows, most)


def tall_rows(rows: int, most: int) -> int | None:
    """A tile of 9 to :data:`TALL_ROWS_PER_TILE` rows where the target has AVX-512's 32 vector
    registers (``most`` of :data:`WIDE_ROWS_PER_TILE`), no tile of ``ROWS_PER_TILE`` to
    ``most`` rows divides ``rows`` and one of those does: a 13 x 13 map's 169 positions in
    tiles of 13, which were padded to 172 and copied on every call, or made the columns (192,
    a ninth computed for nothing). Else ``None``. SqueezeNet's 512 -> 1000 over 13 x 13 alone
    (its channels padded to 1024, :func:`~tvm_hetero.passes.pad_matmul_columns.
    two_vector_channels`) beside ONNX Runtime: see :data:`TALL_ROW_TILES`' benchmark."""
    if not TALL_ROW_TILES or most < WIDE_ROWS_PER_TILE:
        return None
    if largest_divisor(rows, most) >= ROWS_PER_TILE:
        return None
    tall = largest_divisor(rows, TALL_ROWS_PER_TILE)
    return tall if tall > most else None


def padded_row_count(rows: int, most: int = ROWS_PER_TILE) -> int:
    """The rows the rule computes: ``rows``, or the next multiple of ``ROWS_PER_TILE`` where
    no tile of ``ROWS_PER_TILE`` to ``most`` rows (or :func:`tall_rows`) divides them and
    padding adds at most an eighth (ViT's 197 tokens: one-row tiles load two vectors of ``B``
    per two multiply-adds; a 7 x 7 map's 49 positions take tiles of 7 where AVX-512 has the
    registers)."""
    if largest_divisor(rows, most) >= ROWS_PER_TILE or rows < 8 * ROWS_PER_TILE:
        return rows
    if tall_rows(rows, most) is not None:
        return rows
    return -(-rows // ROWS_PER_TILE) * ROWS_PER_TILE


def padded_columns(target: Target, dtype_bits: int, cols: int) -> int:
    """The columns the rule computes: ``cols``, or the next multiple of two vectors where no
    whole vector divides ``cols``: GPT-2's 50257 words, ViT's 197 tokens, SqueezeNet's 13x13
    maps (13-lane vectors ran a 1x1 convolution 6x slower than 16-lane ones)."""
    lanes = vector_lanes(target, dtype_bits)
    if cols < MIN_COLS or panel_width(target, dtype_bits, cols) is not None:
        return cols
    return -(-cols // (2 * lanes)) * (2 * lanes)


def panel_width(target: Target, dtype_bits: int, cols: int) -> int | None:
    """``NR``, the columns of the rule's register tile: two vectors, or one, where that divides
    ``cols``; ``None`` otherwise (the rule pads the columns, :func:`padded_columns`, or leaves a
    kernel of fewer than ``MIN_COLS`` columns alone).

    One row (a batch-1 dense layer) is tiled too: ``1 x NR`` tiles over weights in panels
    stream them at memory speed (dlight's GEMV and reduction rules took 6-12x the time to stream
    them: ``benchmarks/cpu_kernels/gemv.py``)."""
    lanes = vector_lanes(target, dtype_bits)
    if cols < MIN_COLS:
        return None
    return next((nr for nr in (2 * lanes, lanes) if cols % nr == 0), None)


WEIGHT_COLUMNS_MAX_POSITIONS = 400
"""The largest map (output positions) whose 1x1 convolution takes its output channels as the
columns where no whole vector divides its positions (:func:`weights_as_columns`)."""
PADDED_ROWS_MAX_POSITIONS = 49
"""The largest map (output positions) whose 1x1 convolution takes its output channels as the
columns though no row tile divides its positions (:func:`weights_as_columns`): AVX2's 4-row
tiles pad a 7 x 7 map's 49 to 52 rows, where the positions as columns would pad them to 56."""
MIN_WIDER_COLUMNS_DEPTH = 64
"""The fewest input channels of a 1x1 convolution that takes its output channels as the
columns because they make a wider tile than its positions (:func:`wider_with_weights`)."""


def weights_as_columns(
    target: Target, dtype_bits: int, positions: int, inputs: int, outputs: int
) -> bool:  # fmt: skip
    """Whether a 1x1 convolution of ``inputs`` -> ``outputs`` channels over ``positions``
    output positions is computed with its output channels as the tile's columns (its weights
    packed in panels at compile time, the tile written transposed) rather than its image's
    positions, where a tile of 4 rows or more divides the positions (13 x 13's 169 would be
    padded to 172 rows, the image copied on every call: SqueezeNet ran 1.07x slower so) or the
    map has at most :data:`PADDED_ROWS_MAX_POSITIONS` (a 7 x 7 map's rows padded on AVX2:
    MobileNet-V2 and MnasNet ran 1.08x faster so on an AMD EPYC) and either

    - no whole vector divides the positions of a small map (14 x 14, 7 x 7), whose columns
      would be padded to whole vectors (7 x 7 to 64) and the image packed on every call, or
    - the output channels make a tile twice as wide as the positions do
      (:func:`wider_with_weights`)."""
    rows = padded_row_count(positions, rows_per_tile(target))
    if rows != positions and positions > PADDED_ROWS_MAX_POSITIONS:
        return False
    small = positions <= WEIGHT_COLUMNS_MAX_POSITIONS
    return (small and padded_columns(target, dtype_bits, positions) != positions) or (
        wider_with_weights(target, dtype_bits, positions, inputs, outputs)
    )


def wider_with_weights(
    target: Target, dtype_bits: int, positions: int, inputs: int, outputs: int
) -> bool:  # fmt: skip
    """Whether two vectors divide a 1x1 convolution's output channels where only one divides
    its positions (28 x 28's 784) and it has :data:`MIN_WIDER_COLUMNS_DEPTH` input channels or
    more. With the positions as columns its tile is 8 x 1 vectors: 8 multiply-adds for 9
    loads; with the output channels, 8 x 2: 16 for 10. ResNet-50's, ResNet-D's and DenseNet's
    1x1 layers over 28 x 28 ran 1.05-1.3x faster so (Intel Xeon, family 6 model 207,
    ``benchmarks/cpu_kernels/pointwise_layers.py wider``); with fewer input channels the
    transposed write-back outweighs the gain (MobileNet-V2's 32 -> 192: 1.35x slower)."""
    lanes = vector_lanes(target, dtype_bits)
    return (
        panel_width(target, dtype_bits, positions) == lanes
        and panel_width(target, dtype_bits, outputs) == 2 * lanes
        and inputs >= MIN_WIDER_COLUMNS_DEPTH
    )


PANELS, STRIDED = "panels", "strided"
"""How ``B``'s columns lie when no per-call pack is needed: ``j % NR`` innermost, the depth
``k`` just before it (weights ``PackConstantWeights`` laid out at compile time), or
consecutive columns at consecutive addresses with rows ``k`` a stride apart (``x[k, j]``; a
1x1 convolution's image)."""
PANELS_AFTER_DEPTH = True
"""A read is :data:`PANELS` only where the index before ``j % NR`` is the depth, not
``j // NR``: a 1x1 convolution over a map as wide as a panel (32 x 32 with AVX-512's panels
of 32) reads ``x[k, j // 32, j % 32]``, which had been taken for panels, so its image was read
in place with its rows ``k`` 4 KiB apart, a stride whose lines share a few cache sets, never
copied (:func:`_panel_evicts_itself` was not asked). Each layer alone, beside ONNX Runtime
(Intel Xeon, family 6 model 167, two threads, 40 interleaved runs,
``benchmarks/cpu_kernels/pointwise_layers.py panels``): LR-ASPP MobileNet-V3's 960 -> 160 over
32 x 32 2.38 -> 1.13 ms (ONNX Runtime 1.19), 672 -> 160 1.55 -> 0.75 (0.85), 960 -> 128 2.05 ->
0.89 (1.32), 160 -> 960 1.14 -> 0.94 (1.12); 128 -> 512 0.43 -> 0.47 (0.56), its panels no
longer taken for packed ones that fit L2 in blocks; over 28 x 28 (no such read) unchanged."""


def _laid_out_panels(
    sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV, func: tirx.PrimFunc, depth: int, nr: int
) -> str | None:
    """The name of the parameter ``main`` reads as ``B``'s panels laid out at compile time
    (``[panels, depth, nr]``), or ``None``."""
    params = {str(p.name) for p in func.params}
    for read in sch.get(main).reads:
        shape = [int(d) if isinstance(d, tirx.IntImm) else None for d in read.source.shape]
        if str(read.source.name) in params and shape[1:] == [depth, nr] and len(shape) == 3:
            return str(read.source.name)
    return None


def _column_reads(
    sch: s_tir.Schedule,
    main: s_tir.schedule.SBlockRV,
    reindex_b: s_tir.schedule.SBlockRV,
    nr: int,
) -> str | None:
    """:data:`PANELS` or :data:`STRIDED` where ``B`` (with its producers inlined) is read so
    that the tile's loads are contiguous vectors (packing would only add a pass over ``B`` per
    call); None where it must be packed."""
    probe = sch.copy()
    probe.compute_inline(reindex_b)
    inline_producers(probe, main)
    j = probe.get(main).iter_vars[2].var
    kinds = {_column_kind(read, j, nr) for read in _reads_of_columns(probe, main)}
    return kinds.pop() if len(kinds) == 1 else None


def _reads_of_columns(sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV) -> list:
    """The reads of ``main`` that move with its column ``j`` (``B``'s), the output left out."""
    block = sch.get(main)
    j, out = block.iter_vars[2].var, block.writes[0].source
    return [
        read
        for read in block.reads
        if not read.source.same_as(out) and any(uses_var(r.min, j) for r in read.region)
    ]


def _column_kind(read: s_tir.BufferRegion, j: tirx.Var, nr: int) -> str | None:
    last = read.region[-1].min
    if isinstance(last, tirx.FloorMod) and last.a.same_as(j) and is_int(last.b, nr):
        depth_before = len(read.region) > 1 and not uses_var(read.region[-2].min, j)
        if depth_before or not PANELS_AFTER_DEPTH:
            return PANELS
    offset, stride = 0, 1
    for r, extent in zip(reversed(read.region), reversed(read.source.shape), strict=True):
        offset, stride = offset + r.min * stride, stride * extent
    moves_by_one = not uses_var(Analyzer().simplify(offset - j), j)
    return STRIDED if moves_by_one else None


def _panel_evicts_itself(sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV, depth: int) -> bool:
    """Whether the ``depth`` rows of ``B``'s panel, a stride apart, map to too few cache sets to
    stay cached together (more rows than ``CACHE_WAYS`` times the sets they fall into)."""
    reads = _reads_of_columns(sch, main)
    if len(reads) != 1:
        return False  # two images summed as they are read (a fused add): copy neither
    (read,) = reads
    k = sch.get(main).iter_vars[3].var
    dims = [d for d, r in enumerate(read.region) if uses_var(r.min, k)]
    if len(dims) != 1 or not read.region[dims[0]].min.same_as(k):
        return False
    step = math.prod(int(e) for e in read.source.shape[dims[0] + 1 :])
    pitch = step * DataType(str(read.source.dtype)).bits // 8
    sets = CACHE_WAY_BYTES // math.gcd(pitch, CACHE_WAY_BYTES)
    return depth > CACHE_WAYS * min(sets, CACHE_WAY_BYTES // CACHE_LINE_BYTES)


def _copy_panel(sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV, panel) -> None:
    """Copy ``B``'s ``K x NR`` panel into a buffer of its own under the parallel ``panel`` loop,
    once per panel.

    Rows a power of two apart in memory fall into the same few cache sets: a 1x1 convolution
    over a 128 x 128 map (rows 64 KiB apart) re-read its 1,024-row panel from L3 for every row
    tile, at a quarter of ONNX Runtime's speed (SegFormer's decode head); copied, the panel is
    contiguous and stays in L2 (``benchmarks/cpu_kernels/pointwise.py``). Where the rows fall
    into enough sets the copy only costs (a 32 -> 16 over 112 x 112 took twice as long).
    """
    (read,) = _reads_of_columns(sch, main)
    index = next(k for k, r in enumerate(sch.get(main).reads) if r.source.same_as(read.source))
    copy = sch.cache_read(main, index, "global")
    sch.compute_at(copy, panel, preserve_unit_loops=True)
    sch.vectorize(sch.get_loops(copy)[-1])


SYMBOLIC_ROWS = True
"""Whether a matmul whose rows are known only at run time gets :func:`_symbolic_rows`' schedule
(off: the fallback rule's loops, to compare)."""
PADDED_SYMBOLIC_ROWS = True
"""Whether :func:`_symbolic_rows` pads the rows to whole tiles (off: the last tile's rows past
the count skipped by a condition, as before; to compare)."""


def _symbolic_rows(
    sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV, reindexed: tuple, target: Target
) -> s_tir.Schedule | None:
    """A matmul whose row count is symbolic and whose batch, columns and depth are not (a
    mixture of experts' tokens routed to one expert, transformers' JetMoE): each thread a panel
    of ``NR`` columns, tiles of :data:`ROWS_PER_TILE` rows accumulated in vector registers over
    the whole depth, ``B`` read in place (the package's packed weights are panels already).
    The rows are padded to whole tiles (``pad_einsum``: ``A``'s rows past the count read as
    zeros where the tile reads them, the output's cropped in the write-back), so that a tile's
    accumulators are a buffer of constant size, which LLVM keeps in registers. A tile whose
    rows past the count were skipped by a condition instead had accumulators as many rows as
    the count, up to a tile (``min(n, 4)``): allocated from the pool at run time, stored to
    memory after every product. On the fallback rule's loops (the depth innermost, scalar)
    90 x 256 x 1024 took 68 ms (AMD EPYC Zen 4, with a transpose of the weights in each run);
    with the rows skipped 0.65-0.8 ms, about three times ONNX Runtime's MatMul; padded, level
    with it from 3 rows to 200 (0.23-0.28 ms at 90 rows; one row 33 us, ONNX Runtime 19:
    a tile computes four), ``benchmarks/cpu_kernels/symbolic_rows.py``. ``None`` where the
    columns take no whole vector."""
    loops = sch.get_loops(main)
    extents = [sch.get(loop).extent for loop in loops]
    if not SYMBOLIC_ROWS or len(extents) != 4:
        return None
    if any(not isinstance(e, tirx.IntImm) for k, e in enumerate(extents) if k != 1):
        return None
    batches, cols = int(extents[0]), int(extents[2])
    lanes = vector_lanes(target, output_bits(sch, main))
    nr = next((w for w in (2 * lanes, lanes) if cols % w == 0), None)
    if nr is None:
        return None
    producers = {sch.get(block).name_hint for block in sch.get_producers(main)}
    if PADDED_SYMBOLIC_ROWS:  # an einsum's plain reads: before the reindexes are inlined
        sch.pad_einsum(main, [1, ROWS_PER_TILE, 1, 1])
    for block in reindexed:
        sch.compute_inline(block)
    for block in sch.get_producers(main):  # A's padded rows, the one producer pad_einsum made
        if sch.get(block).name_hint not in producers:
            sch.compute_inline(block)
    batch, i, j, k = sch.get_loops(main)
    j0, j1 = sch.split(j, [None, nr])
    i0, i1 = sch.split(i, [None, ROWS_PER_TILE])
    sch.reorder(batch, j0, i0, k, i1, j1)
    panel = sch.fuse(batch, j0)
    if batches * cols // nr > 1:
        sch.parallel(panel)
    sch.unroll(i1)
    sch.vectorize(j1)
    accumulate_in_registers(sch, main, i0, k, target, unrolled=True)
    return sch
