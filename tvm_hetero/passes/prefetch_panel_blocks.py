"""PrefetchPanelBlocks: a CPU matmul kernel asks for its panel's next depth block while it
computes the current one."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import tirx
from tvm.ir import IRModule
from tvm.sym.analyzer import Analyzer

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.sblocks import loop_with, realizes, with_children, with_prim_funcs
from tvm_hetero.schedules.cpu.matmul import PREFETCH_ANNOTATION

LINES_PER_TILE = 10
"""Cache lines of the next block asked for at the start of each row tile: a block of 16 KiB is
256 lines, asked for over the first 26 of a 14 x 14 map's 28 row tiles. Zero: none."""
LINE_BYTES = 64
NEXT_PANEL_AFTER_LAST_BLOCK = True
"""Whether a panel's last block asks for the first block of the next panel (the thread's next
task), not for rows of its own again (False, to compare)."""


@tvm.transform.module_pass(opt_level=0, name="PrefetchPanelBlocks")
class PrefetchPanelBlocks:
    """At the start of each row tile of a panel summed in blocks of its depth, prefetch
    :data:`LINES_PER_TILE` cache lines of the panel's next block (``llvm.prefetch``, read, to
    every cache level), so that the next block comes while the row tiles compute this one.

    A 1x1 convolution over a small map with its weights as the columns reads each block of a
    panel (16 KiB) with its first row tile and keeps it in L1 over the others; inside a model
    the weights come from beyond L2 (read once a run), and the first row tile waited for each
    block: ResNet-50's 1024 -> 512 over 14 x 14 took 500 us alone and 590 after its caches were
    flushed, 560 with the next block asked for (a probe's kernel, Intel Xeon, two threads).
    Numbers are unchanged: a prefetch reads nothing into the program, and the last block asks
    for rows of the panel it has (the index is clamped).

    Notes
    -----
    Runs on the scheduled kernels, before TVM's lowering
    (:func:`~tvm_hetero.build.multi_device.tir_pipeline`). The panel and the current block's
    first row come from the first block under the marked loop that reads the weights
    (:func:`~tvm_hetero.ir.sblocks.realizes`), its bindings with the marked loop and the loops
    around the block at their first value; a mark whose
    weights or block are not found asks for nothing. The mark is removed either way.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with prefetches where the matmul rule asked for them."""
        return with_prim_funcs(mod, prefetched)


def prefetched(func: PrimFunc) -> PrimFunc:
    """``func`` with its annotated row-tile loops prefetching (``func`` if none is)."""
    return with_marked_loops(func, PREFETCH_ANNOTATION, _block_asked)


def with_marked_loops(func: PrimFunc, mark: str, rewrite: Callable) -> PrimFunc:
    """``func`` with each loop annotated ``mark`` given the body that ``rewrite(loop, said,
    weights)`` returns (the loop with the marks inside it done, the annotation's value, the
    parameters by name), or its own body where that is ``None``; the mark is removed either
    way. ``func`` itself where no loop is marked."""
    weights = {str(p.name): p for p in func.params}

    def walk(stmt: tirx.Stmt) -> tirx.Stmt:
        if not isinstance(stmt, tirx.For):
            return with_children(stmt, walk)
        body = walk(stmt.body)
        said = stmt.annotations.get(mark)
        if said is None:
            return stmt if body.same_as(stmt.body) else loop_with(stmt, body=body)
        rewritten = rewrite(loop_with(stmt, body=body), said, weights)
        annotations = {k: v for k, v in stmt.annotations.items() if k != mark}
        body = body if rewritten is None else rewritten
        return loop_with(stmt, body=body, annotations=annotations)

    body = walk(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


def _block_asked(tile: tirx.For, said, weights: dict) -> tirx.Stmt | None:
    """``tile``'s body after the prefetches of its panel's next block (``said``: the weights'
    name and the block's depth), or ``None``."""
    if LINES_PER_TILE <= 0:
        return None
    asked = _ask(tile, weights.get(str(said[0])), int(said[1]))
    return None if asked is None else tirx.SeqStmt([asked, tile.body])


def _ask(tile: tirx.For, buffer, depth: int) -> tirx.Stmt | None:
    """The prefetches at the start of row tile ``tile`` of ``buffer``'s panel's next block of
    ``depth`` rows, or ``None`` where no block under ``tile`` reads ``buffer``."""
    read = panel_read(tile, buffer)
    if read is None:
        return None
    panel, first = read
    rows, width = int(buffer.shape[1]), int(buffer.shape[2])
    per_row = lines_per_row(buffer)
    lines = depth * per_row
    dtype = str(tile.min.ty)
    step = tirx.Var("prefetched", dtype)
    line = tile.loop_var * LINES_PER_TILE + step
    row = first + depth + tirx.floordiv(line, per_row)
    if NEXT_PANEL_AFTER_LAST_BLOCK:  # past the panel's last row: the next panel's first block
        panel = tirx.min(panel + tirx.floordiv(row, rows), int(buffer.shape[0]) - 1)
        row = tirx.floormod(row, rows)
    else:
        row = tirx.min(row, rows - 1)
    column = tirx.floormod(line, per_row) * (width // per_row)
    ask = prefetch(buffer, [panel, row, column], L1)
    loop = tirx.For(step, tirx.const(0, dtype), tirx.const(LINES_PER_TILE, dtype),
                    tirx.ForKind.UNROLLED, ask)  # fmt: skip
    return tirx.IfThenElse(tile.loop_var * LINES_PER_TILE < lines, loop, None)


def panel_read(tile: tirx.For, buffer) -> tuple | None:
    """``(panel, row)``: the panel of ``buffer`` (``[panels, depth, width]``) that the first
    block under ``tile`` reading it reads, and its first row, with ``tile`` and the loops
    inside it at their first values (expressions of the loops around ``tile``); ``None`` where
    ``buffer`` is not such a buffer or no block under ``tile`` reads it."""
    if buffer is None or len(buffer.shape) != 3:
        return None
    found = reads_of(tile.body, buffer)
    if not found:
        return None
    realize, loops, region = found[0]
    analyzer = Analyzer()
    for var, value in zip(
        (iv.var for iv in realize.block.iter_vars), realize.iter_values, strict=True
    ):
        analyzer.bind(var, value)
    for loop in [tile, *loops]:  # the tile's first row tile and first element
        analyzer.bind(loop.loop_var, loop.min)
    return analyzer.simplify(region[0].min), analyzer.simplify(region[1].min)


def reads_of(stmt: tirx.Stmt, buffer) -> list[tuple]:
    """``(realize, loops, region)`` of each read of ``buffer`` by a block under ``stmt``, in
    order (:func:`~tvm_hetero.ir.sblocks.realizes`)."""
    return [
        (realize, loops, read.region)
        for realize, loops in realizes(stmt)
        for read in realize.block.reads
        if str(read.source.name) == str(buffer.name)
    ]


def lines_per_row(buffer) -> int:
    """Cache lines in one row of ``buffer``'s panels (at least one)."""
    width = int(buffer.shape[2])
    return max(1, width * tvm.DataType(str(buffer.dtype)).bits // 8 // LINE_BYTES)


L1, L2 = 3, 2
"""``llvm.prefetch``'s locality: into every cache level (``prefetcht0``), or into L2 and
beyond (``prefetcht1``)."""


def prefetch(buffer, indices: list, locality: int) -> tirx.Stmt:
    """A read prefetch of the cache line holding ``buffer[indices]``."""
    address = tirx.address_of(tirx.BufferLoad(buffer, indices))
    return tirx.Evaluate(tirx.call_llvm_intrin(
        "void", "llvm.prefetch", address, tirx.const(0, "int32"), tirx.const(locality, "int32"),
        tirx.const(1, "int32"),
    ))  # fmt: skip
