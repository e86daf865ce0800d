"""Row reductions on CPUs (softmax, layer norm, mean, GEMV): rows reduced in vector lanes, or
dlight's CPU rules, named, and checked for reductions computed again for every element of a
broadcast."""

from __future__ import annotations

import math
from typing import NamedTuple

from tvm import s_tir, tirx
from tvm.s_tir import dlight
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target
from tvm.tirx.analysis import undefined_vars

from tvm_hetero.ir.sblocks import realizes
from tvm_hetero.schedules.cpu.common import (
    CpuRule,
    apply_each,
    const_extents,
    is_serial,
    is_spatial,
    largest_divisor,
    vector_lanes,
    vectorize_parallel,
)
from tvm_hetero.schedules.cpu.padded_rows import pad_row_reductions


class Reduction(CpuRule):
    """Rows reduced in vector lanes (:func:`rows_in_vectors`), padded to whole vectors where none
    divides them, else dlight's ``cpu.Reduction``: parallel rows, vectorized element-wise steps,
    unrolled sums; where that would compute a reduction again under a loop it does not use, two
    passes.

    dlight parallelizes the last block's leading spatial loops and moves every block under them.
    When the reduction's rows are not those loops (a group norm over one group: the mean of all
    of ``(1, 1, C*H*W)`` broadcast back over its ``C*H*W`` elements, whose unit axes the loop
    nest lost), the sum over all elements ran once per element: ``GroupNorm(1, 64)`` over
    ``28 x 28`` took 1.3 s against ONNX Runtime's 0.08 ms. Then, where there is one row only
    (nothing for dlight to run in parallel), where a row sums :data:`LONG_SUM` elements or
    more (every sum one scalar chain of adds: ``InstanceNorm2d`` over 56 x 56 ran 4.2x ONNX
    Runtime's time), and where a sum over a map takes partial sums in lanes
    (:func:`window_sums`: a squeeze-excite's mean), each reduction runs once at the root, its
    rows in parallel and each row summed in vector lanes, the element-wise steps are inlined
    into their consumers, and the last block runs vectorized and in parallel
    (:func:`two_passes`).
    """

    name = "reduction"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        rows = rows_in_vectors(func, target)
        if rows is not None:
            return rows
        sch = dlight.cpu.Reduction().apply(func, target, False)
        if sch is None:
            return None
        sums = sum_extents(func)
        short = longest_sum(sums) < LONG_SUM and not window_sums(sums, vector_lanes(target, 32))
        if recomputed(sch) == 1 and _rows(sch) > 1 and short:
            return sch
        return two_passes(func, target)


MIN_ROW_LANES = 4
"""The narrowest divisor of a row :func:`rows_in_vectors` reduces it in; a row no such vector
divides (ViT's 197 tokens) is padded to whole vectors of the CPU's lanes."""


def row_lanes(length: int, lanes: int) -> tuple[int, bool]:
    """The lanes :func:`rows_in_vectors` cuts a row of ``length`` into, out of the CPU's
    ``lanes``, and whether the row is padded to whole vectors of them: the largest divisor of
    the row up to the lanes where it is a power of two of :data:`MIN_ROW_LANES` or more (or the
    row is shorter than a vector), else the CPU's lanes over the row padded. A vector of 15 or
    6 lanes (Whisper's 1,500 frames with AVX-512 or AVX2) is cut by LLVM into vectors of 8, 4,
    2 and 1: its softmax over 6 x 1,500 x 1,500 took 11.6 ms in vectors of 15 and 8.4 ms in
    vectors of 16 over rows padded to 1,504 (ONNX Runtime 7.5; one thread), 5.4 and 4.3 ms
    on two threads (ONNX Runtime 4.4; AMD EPYC Zen 4, the kernel alone in 11-15 interleaved
    rounds). The Whisper encoder as a whole: 225.5 -> 220.8 ms, ONNX Runtime 209.8
    (``benchmarks/models/before_and_now.py``, 7 rounds)."""
    divisor = largest_divisor(length, lanes)
    whole = divisor & (divisor - 1) == 0 or length < lanes
    if divisor >= MIN_ROW_LANES and whole:
        return divisor, False
    return lanes, True


def rows_in_vectors(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """Rows reduced in vector lanes: every block computed row by row under the last block's
    rows (in parallel), each step over the row vectorized by the largest divisor ``v`` of its
    length up to the CPU's lanes, each reduction over the row ``rfactor``-ed into ``v`` partial
    results that a vector updates, then summed. Where no power of two ``v`` of
    :data:`MIN_ROW_LANES` or more divides the row (:func:`row_lanes`), the reductions run over
    the row padded to whole vectors of the CPU's lanes
    (:func:`~.padded_rows.pad_row_reductions`) and every loop over the row is partitioned into
    its whole vectors and a last, partial one. None where the kernel is not such rows (the
    last block not element-wise, no reduction, a reduction over other axes or more than one, a
    row shorter than a vector with no such ``v``, one row, or a reduction that would run again
    for every row).

    dlight's schedule reduces each row as one scalar chain: a softmax over Whisper's 1,500
    frames (6 heads) took 25 ms where ONNX Runtime takes 3; in lanes, 5.7 (AMD EPYC Zen 4, two
    threads; ``benchmarks/cpu_kernels/softmax.py``).
    """
    sch = s_tir.Schedule(func)
    blocks = _blocks(sch)
    extents = const_extents(sch, sch.get_loops(blocks[-1]))
    if not is_spatial(sch, blocks[-1]) or extents is None or math.prod(extents[:-1]) < 2:
        return None
    if all(is_spatial(sch, block) for block in blocks):
        return None  # nothing reduced: the injective rule's
    length = extents[-1]
    lanes, pad = row_lanes(length, vector_lanes(target, 32))
    row = Row(length, lanes, length)
    if pad:
        row = Row(length, lanes, -(-length // lanes) * lanes)
        padded = pad_row_reductions(func, length, row.padded) if length >= lanes else None
        if padded is None:
            return None
        sch = s_tir.Schedule(padded)
    try:
        _inline_read_once(sch)
        for block in _blocks(sch)[:-1]:
            if not is_spatial(sch, block):
                _row_partials(sch, block, row)
        blocks = _blocks(sch)
        loops = sch.get_loops(blocks[-1])
        rows = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        for block in reversed(blocks[:-1]):
            sch.compute_at(block, rows, preserve_unit_loops=False)
        if recomputed(sch) > 1:
            return None
        if not is_serial(target):  # the schedule of a padded row is not one to replay
            sch.parallel(rows)
        for block in list(sch.get_child_blocks(rows)):
            _vectorize_row_step(sch, block, row)
    except (ScheduleError, ValueError):
        return None
    return sch


def _inline_read_once(sch: s_tir.Schedule) -> None:
    """Inline each element-wise step over the row that one step reads (softmax's ``x - max``
    into its ``exp``): a store and a load an element fewer. A step read twice (the ``exp`` that
    is summed and divided) stays, computed once. Softmax 6 x 1,500 x 1,500: 6.5 -> 4.9 ms, 3 x
    197 x 197: 35 -> 28 us (Zen 4, two threads, kernels alone in interleaved rounds)."""
    blocks = [b for b in _blocks(sch)[:-1] if is_spatial(sch, b) and len(sch.get_consumers(b)) == 1]
    apply_each(sch.compute_inline, blocks)


class Row(NamedTuple):
    """A row as :func:`rows_in_vectors` cuts it: its ``length``, the ``lanes`` of its vectors,
    and the ``padded`` length its reductions run over (``length`` where the lanes divide it)."""

    length: int
    lanes: int
    padded: int

    @property
    def whole(self) -> int:
        """Vectors wholly inside the row."""
        return self.length // self.lanes


def _row_partials(sch: s_tir.Schedule, block, row: Row) -> None:
    """``rfactor`` ``block``'s one reduction, over the row's ``padded`` length, into ``lanes``
    partial results (a ``ValueError`` where it is not such a reduction)."""
    reductions = [v for v in sch.get(block).iter_vars if v.iter_type != tirx.IterVar.DataPar]
    inner = sch.get_loops(block)[-1]
    if len(reductions) != 1 or const_extents(sch, [inner]) != [row.padded]:
        raise ValueError("not a reduction over the row")
    _, lane = sch.split(inner, [None, row.lanes])
    sch.rfactor(lane, factor_axis=0)


def _vectorize_row_step(sch: s_tir.Schedule, block, row: Row) -> None:
    """Vectorize one step of a row: an element-wise step over the row by ``lanes``, a partial
    reduction (``_rf``) across its lanes with the row's chunks outside and its initialisation
    taken out of the loop; the final sum of the partial results stays scalar. A row the lanes
    do not divide is partitioned into its whole vectors (no guard left in them) and the last."""
    loops = sch.get_loops(block)[1:]
    extents = const_extents(sch, loops)
    if is_spatial(sch, block) and extents and extents[-1] == row.length:
        chunk, lane = sch.split(loops[-1], [None, row.lanes])
        sch.vectorize(lane)
    elif sch.get(block).name_hint.endswith("_rf") and len(loops) == 2:
        lane, chunk = loops if extents[0] == row.lanes else loops[::-1]
        sch.reorder(chunk, lane)
        sch.vectorize(lane)
        init = sch.get_loops(sch.decompose_reduction(block, chunk))[-1]
        if sch.get(init).kind != tirx.ForKind.VECTORIZED:
            sch.vectorize(init)
    else:
        return
    if row.length % row.lanes:
        sch.loop_partition(chunk, [row.whole, None])


LONG_SUM = 2048
"""Elements a row sums from which lanes of partial sums pay over dlight's one chain a row (a
transformer's layer norm over 768 keeps dlight's schedule, a group norm's 25,088 does not)."""


def sum_extents(func: tirx.PrimFunc) -> list[list[int]]:
    """Per block of ``func`` whose reduction extents are constants, those extents (none for a
    spatial block)."""
    sch = s_tir.Schedule(func)
    found = []
    for block in _blocks(sch):
        extents = [v.dom.extent for v in sch.get(block).iter_vars
                   if v.iter_type == tirx.IterVar.CommReduce]  # fmt: skip
        if all(isinstance(e, tirx.IntImm) for e in extents):
            found.append([int(e) for e in extents])
    return found


def longest_sum(sums: list[list[int]]) -> int:
    """The most elements any reduction block sums into one output (1 for none); ``sums``:
    :func:`sum_extents` of the kernel."""
    return max((math.prod(e) for e in sums), default=1)


def window_sums(sums: list[list[int]], lanes: int) -> bool:
    """Whether a reduction block sums over two axes or more, in partial sums of
    :func:`_lane_width` (a mean over a 28 x 28 map: dlight's one scalar chain a row took
    0.056 ms over 144 channels where ONNX Runtime takes 0.015); ``sums``: :func:`sum_extents`
    of the kernel."""
    counts = [math.prod(e) for e in sums if len(e) >= 2]
    return any(_lane_width(count, lanes) is not None for count in counts)


def recomputed(sch: s_tir.Schedule) -> int:
    """How many times the most recomputed reduction block of ``sch`` runs over its own domain:
    the larger of :func:`unused_loop_runs` and, where every extent is a constant, its runs (the
    loops' extents multiplied) over its domain's size, rounded down (a padded loop's few extra
    steps are not counted). The second finds a loop of fused axes of which the block reads
    one: a softmax over the tokens of ``(1, 8, 785, 16)``, ``axis=2``, had each of its 128
    columns' max and sum under the 6,280 fused rows of its output, each column reduced again
    for each of its 785 tokens, in 0.99 s."""
    found = _reductions(sch)
    return max((max(_unused_runs(*r), _domain_runs(*r)) for r in found), default=1)


def unused_loop_runs(sch: s_tir.Schedule) -> int:
    """How many times the most recomputed reduction block of ``sch`` runs over its own domain,
    as far as the loops around it that none of its iterators use tell: their constant extents
    multiplied."""
    return max((_unused_runs(*r) for r in _reductions(sch)), default=1)


def _unused_runs(realize, loops: list) -> int:
    """The constant extents of the ``loops`` around ``realize`` that none of its iterators
    use, multiplied."""
    used = {v for value in realize.iter_values for v in undefined_vars(value)}
    return math.prod(int(f.extent) for f in loops
                     if f.loop_var not in used and isinstance(f.extent, tirx.IntImm))  # fmt: skip


def _domain_runs(realize, loops: list) -> int:
    """The ``loops``' extents multiplied over ``realize``'s domain, rounded down; 1 where an
    extent is not a constant."""
    block = realize.block
    extents = [f.extent for f in loops] + [v.dom.extent for v in block.iter_vars]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return 1
    domain = math.prod(int(v.dom.extent) for v in block.iter_vars)
    return math.prod(int(f.extent) for f in loops) // max(domain, 1)


def _reductions(sch: s_tir.Schedule) -> list[tuple]:
    """``(realize, loops)`` of each block of ``sch`` with a reduction iterator."""
    return [
        (realize, loops)
        for realize, loops in realizes(sch.mod["main"].body)
        if any(v.iter_type != tirx.IterVar.DataPar for v in realize.block.iter_vars)
    ]


def _rows(sch: s_tir.Schedule) -> int:
    """The extent of the outermost loop around the last block (dlight's parallel rows)."""
    found = realizes(sch.mod["main"].body)
    loops = found[-1][1] if found else []
    extent = loops[0].extent if loops else None
    return int(extent) if isinstance(extent, tirx.IntImm) else 2


def two_passes(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """Each reduction once at the root, the element-wise steps inlined into the last block, which
    runs vectorized and in parallel (a ``ScheduleError`` on the way makes the rule decline the
    kernel: the next rule, at worst the fallback, takes it)."""
    sch = s_tir.Schedule(func)
    blocks = _blocks(sch)
    for block in blocks[:-1]:
        if is_spatial(sch, block):
            try:
                sch.compute_inline(block)
            except ScheduleError:
                continue
    for block in _blocks(sch):
        if is_spatial(sch, block):
            vectorize_parallel(sch, block, target)
            continue
        _sum_in_lanes(sch, block, vector_lanes(target, 32))
    return sch


def _sum_in_lanes(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, lanes: int) -> None:
    """Sum ``block``'s innermost reduction loop in vector accumulators (``rfactor``: partial
    sums per lane, then the lanes summed), ``lanes`` of them where they divide it, else its
    largest divisor below (:func:`_lane_width`); else unroll it by ``lanes`` as dlight does.
    One scalar chain of adds waits on each add's latency."""
    kinds = [v.iter_type for v in sch.get(block).iter_vars]
    rows = next((k for k, kind in enumerate(kinds) if kind != tirx.IterVar.DataPar), len(kinds))
    if _columns_in_lanes(sch, block, rows, lanes):
        return
    inner = _whole_window(sch, block, rows, lanes) or sch.get_loops(block)[-1]
    extents = const_extents(sch, [inner])
    if not extents or extents[0] <= lanes:
        _parallel_rows(sch, block, rows)
        return
    width = _lane_width(extents[0], lanes)
    _, lane = sch.split(inner, [None, width or lanes])
    if width is not None:
        try:
            partial = sch.rfactor(lane, factor_axis=0)
            sch.vectorize(sch.get_loops(partial)[-1])
            _parallel_rows(sch, partial, rows)
            return
        except ScheduleError:  # a lane loop that cannot be a vector: unrolled below
            pass
    sch.annotate(lane, "pragma_auto_unroll_max_step", lanes)
    sch.annotate(lane, "pragma_unroll_explicit", 1)
    _parallel_rows(sch, block, rows)


COLUMNS_IN_LANES = True
"""Reductions over an axis before the innermost, contiguous one take a vector of columns at a
time (:func:`_columns_in_lanes`); False: their rows are reduced in lanes as any other's."""


def _columns_in_lanes(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, rows: int, lanes: int
) -> bool:
    """Reduce ``block`` a vector of its columns at a time, where every buffer it reads has its
    innermost output axis (``rows`` axes, then the reduction's) as its own last, contiguous
    axis, and the reduction runs over an axis before it: that axis is cut into vectors of its
    largest divisor up to ``lanes`` (at least :data:`MIN_ROW_LANES`), the reduction loops
    move inside each vector's step, and the axes before them run in parallel. A softmax over
    the tokens of heads x tokens x channels (CoaT's keys) reduced each column in lanes of
    tokens, read a row of channels apart: 2.3 ms for 8 x 3,137 x 8 against ONNX Runtime's
    0.84. False, and nothing changed, where this does not apply."""
    stmt = sch.get(block)
    if not COLUMNS_IN_LANES or rows == 0 or rows == len(stmt.iter_vars):
        return False
    column = stmt.iter_vars[rows - 1]
    extent = column.dom.extent
    if not isinstance(extent, tirx.IntImm):
        return False
    width = largest_divisor(int(extent), lanes)
    loops = sch.get_loops(block)
    if width < MIN_ROW_LANES or len(loops) != len(stmt.iter_vars):
        return False
    for region in stmt.reads:
        last = region.region[-1].min if region.region else None
        if not (isinstance(last, tirx.Var) and last.same_as(column.var)):
            return False
    _, vector = sch.split(loops[rows - 1], [None, width])
    sch.reorder(*loops[rows:], vector)
    sch.vectorize(vector)
    _parallel_rows(sch, block, rows)
    loops = sch.get_loops(block)  # the reduction's loops, then the vector's
    init = sch.decompose_reduction(block, loops[len(loops) - 1 - (len(stmt.iter_vars) - rows)])
    sch.vectorize(sch.get_loops(init)[-1])
    return True


def _lane_width(count: int, lanes: int) -> int | None:
    """How many partial sums a sum of ``count`` elements keeps: ``lanes`` where they divide
    it, else its largest divisor below (a 14 x 14 map's 196 in 14), at least
    :data:`MIN_ROW_LANES` and a quarter of ``count`` at most; None where none is."""
    width = largest_divisor(count, lanes)
    return width if width >= MIN_ROW_LANES and count >= 4 * width else None


def _whole_window(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, rows: int, lanes: int
) -> s_tir.schedule.LoopRV | None:
    """The reduction loops fused into one where together they take wider partial sums than
    the innermost alone (:func:`_lane_width`: 16 for a 56 x 56 map, whose rows of 56 take 14;
    7 for 7 x 7, whose rows take none) and they walk the last axes of everything the block
    reads in order, one run of memory (a squeeze-excite's mean over 56 x 56 is 3,136
    consecutive floats). Summed row by row, each such sum was one scalar chain: the mean over
    144 x 56 x 56 took 0.21 ms where ONNX Runtime takes 0.05. None where it does not apply."""
    loops = sch.get_loops(block)[rows:]
    extents = const_extents(sch, loops)
    if len(loops) < 2 or extents is None:
        return None
    row, whole = _lane_width(extents[-1], lanes), _lane_width(math.prod(extents), lanes)
    if whole is None or row == lanes or (row or 0) >= whole:
        return None
    stmt = sch.get(block)
    axes = [v.var for v in stmt.iter_vars[rows:]]
    for region in stmt.reads:
        tail = [r.min for r in region.region[-len(axes) :]]
        if len(region.region) < len(axes) or any(
            not (isinstance(t, tirx.Var) and t.same_as(a)) for t, a in zip(tail, axes, strict=True)
        ):
            return None
    return sch.fuse(*loops)


def _parallel_rows(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, rows: int) -> None:
    """Run ``block``'s first ``rows`` loops (its output rows), fused, in parallel when there
    are several."""
    loops = sch.get_loops(block)[:rows]
    extents = const_extents(sch, loops)
    if loops and extents is not None and math.prod(extents) > 1:
        sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])


def _blocks(sch: s_tir.Schedule) -> list:
    return list(sch.get_child_blocks(sch.get_sblock("root")))


class Gemv(CpuRule):
    """dlight's ``cpu.GEMV`` for matrix-vector products (one row of activations)."""

    name = "gemv"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = dlight.cpu.GEMV().apply(func, target, False)
        return sch[0] if isinstance(sch, list) else sch
