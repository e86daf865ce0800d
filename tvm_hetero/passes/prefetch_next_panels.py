"""PrefetchNextPanels: a CPU matmul kernel asks for its thread's next panel of weights while
its row tiles sum the current one."""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import IRModule

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.sblocks import loop_with, with_children, with_prim_funcs
from tvm_hetero.passes.prefetch_panel_blocks import (
    L2,
    lines_per_row,
    panel_read,
    prefetch,
    reads_of,
    with_marked_loops,
)
from tvm_hetero.schedules.cpu.common import is_int
from tvm_hetero.schedules.cpu.matmul import NEXT_PANEL_ANNOTATION

MOST_LINES_A_STEP = 8
"""The most cache lines of the next panel asked for in one pass of the depth loop."""


@tvm.transform.module_pass(opt_level=0, name="PrefetchNextPanels")
class PrefetchNextPanels:
    """In each pass of a marked row tile's depth loop, prefetch the next few cache lines of
    the panel after this one (``llvm.prefetch``, read, into L2), spread over the panel's row
    tiles so that the whole next panel is asked for once, by the time its first row tile
    starts: ``ceil(lines / (row tiles x passes))`` lines a pass, at most
    :data:`MOST_LINES_A_STEP`.

    A matmul whose weights are laid out in panels at compile time gives each task one panel,
    or each thread a band of rows over every panel in turn
    (:class:`~tvm_hetero.schedules.cpu.matmul.Matmul`); a panel's first row tile reads it
    from wherever it is, and inside a model that is beyond L2 (every weight is read once a
    run): each panel started with a wait the hardware prefetcher, which stops at each 4 KiB
    page, did not hide. ConvNeXt-T's 49 x 768 by 768 x 3072 layers took 1.18 ms alone and 1.51
    inside the model (``benchmarks/models/kernels_inside.py``); with their caches flushed
    before each call, 3.1 ms, and 1.9 asking for the next panel (a prototype of this pass,
    Intel Xeon, two threads). The marked loop's thread computes consecutive panels (a
    parallel loop's share is a run of its tasks; in bands, the panel is the task's remainder
    and the band's last asks for itself, as does the last panel; where the mark says a
    panel's row tiles are cut in groups, the task's panel is its quotient by the groups and
    its group the remainder, and the lines are spread over the groups' row tiles: RegNet-X's
    400 -> 400 over 7 x 7, 13 panels of 7 row tiles in 7 groups, 0.943 of its time whole,
    turn by turn, on a Zen 4). Numbers are unchanged: a prefetch reads nothing into the
    program.

    Notes
    -----
    Runs on the scheduled kernels, before TVM's lowering
    (:func:`~tvm_hetero.build.multi_device.tir_pipeline`), after
    :class:`~tvm_hetero.passes.PrefetchPanelBlocks`. The panel comes from the first block under
    the marked loop that reads the weights (:func:`~tvm_hetero.passes.prefetch_panel_blocks.
    panel_read`); the depth loop is the outermost loop under the mark that reads them. A mark
    whose weights, block or depth loop is not found, or whose extents are not constants, asks
    for nothing. The mark is removed either way.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with prefetches where the matmul rule asked for them."""
        return with_prim_funcs(mod, prefetched)


def prefetched(func: PrimFunc) -> PrimFunc:
    """``func`` with its marked row-tile loops asking for their next panel (``func`` if none
    is marked)."""
    return with_marked_loops(func, NEXT_PANEL_ANNOTATION, _next_asked)


def _next_asked(tile: tirx.For, said, weights: dict) -> tirx.Stmt | None:
    return _asking(tile, weights.get(str(said[0])), int(said[1]))


def _asking(tile: tirx.For, buffer, groups: int) -> tirx.Stmt | None:
    """``tile``'s body with its depth loop asking for the next panel of ``buffer``, or
    ``None``. Where a panel's row tiles are cut in ``groups`` groups that follow each other
    on a thread (its panel ``floordiv(task, groups)``), the lines are spread over the groups
    too."""
    read = panel_read(tile, buffer)
    if read is None or not isinstance(tile.extent, tirx.IntImm):
        return None
    panel, group = read[0], 0
    if groups > 1:
        if not (isinstance(panel, tirx.FloorDiv) and is_int(panel.b, groups)):
            return None
        group = tirx.floormod(panel.a, groups)
    panels, depth = int(buffer.shape[0]), int(buffer.shape[1])
    per_row = lines_per_row(buffer)
    lines = depth * per_row
    width = int(buffer.shape[2]) // per_row  # elements a line

    def asking(loop: tirx.For) -> tirx.Stmt | None:
        if not isinstance(loop.extent, tirx.IntImm):
            return None
        steps = groups * int(tile.extent) * int(loop.extent)
        per_step = min(MOST_LINES_A_STEP, -(-lines // steps))
        tiles_before = group * int(tile.extent) + tile.loop_var - tile.min  # on this panel
        step = tiles_before * int(loop.extent) + (loop.loop_var - loop.min)
        following = tirx.min(panel + 1, panels - 1)
        asks = []
        for n in range(per_step):
            line = step * per_step + n
            row = tirx.min(tirx.floordiv(line, per_row), depth - 1)
            asks.append(
                prefetch(buffer, [following, row, tirx.floormod(line, per_row) * width], L2)
            )
        ask = tirx.IfThenElse(
            step * per_step < lines, tirx.SeqStmt(asks) if per_step > 1 else asks[0], None
        )
        return loop_with(loop, body=tirx.SeqStmt([ask, loop.body]))

    found = []

    def replaced(stmt: tirx.Stmt) -> tirx.Stmt:
        if not isinstance(stmt, tirx.For):
            return with_children(stmt, replaced)
        if found or not reads_of(stmt, buffer):
            return stmt
        found.append(stmt)
        return asking(stmt) or stmt

    body = replaced(tile.body)
    return body if found and not body.same_as(tile.body) else None
