"""Convolutions on CPUs (conv2d, depthwise, conv1d/3d): register tiles over channels and width."""

from __future__ import annotations

import math

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import (
    PARALLEL_MIN_FLOPS,
    CpuRule,
    accumulate_in_registers,
    const_extents,
    largest_divisor,
    output_bits,
    vector_lanes,
)

CHANNELS_PER_TILE = 8
"""Output channels of the register tile; each loaded input vector feeds this many FMAs.

With one vector of columns that is 8 accumulators, half of AVX2's 16 registers (measured best
of 4/6/8 channels x 1/2 vectors on ResNet-18 shapes)."""
MIN_WIDTH = 4


def vector_width(width: int, lanes: int, whole: bool = False) -> tuple[int, int]:
    """``(W', v)``: the output width to compute and its vector, the largest divisor of ``W'`` up
    to ``lanes``. ``W'`` is ``width`` or up to ``lanes - 1`` wider, whichever takes the fewest
    vectors per row (the narrowest on a tie): a vector costs about the same with any number of
    lanes, so 13 columns are 2 vectors of 7 at width 14, not 13 of 1 (``PadConvolutionWidths``
    widens the convolution, the rule then vectorizes what it is given). ``whole``: only whole
    vectors, for tiles with no output channels to reuse a load across (depthwise and grouped
    convolutions: 7 lanes are three instructions, and a 3x3 depthwise convolution 16 wide took
    0.73x the time of one 14 wide).
    """
    if whole and width >= MIN_WIDTH:
        wide = -(-width // lanes) * lanes
        return wide, lanes
    widths = range(width, width + lanes) if width >= MIN_WIDTH else (width,)
    return min(((w, largest_divisor(w, lanes)) for w in widths), key=lambda c: (c[0] / c[1], c[0]))


class Conv(CpuRule):
    """A reduction over two inputs (data, weight) whose output's last axis is contiguous.

    Tile: ``CHANNELS_PER_TILE`` output channels (a spatial axis the data operand does not use,
    so one data vector is reused across them) by a vector of output columns, accumulated in
    registers over the reduction axes; the remaining leading spatial axes are the parallel loop.
    Depthwise convolutions have no such channel axis and get a vector-only tile. Padding stays a
    separate parallel pass so the inner loop has no bounds checks; epilogues are folded in.
    """

    name = "conv"
    operands = 2
    """Reads of the reduction block: data and weights."""

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        reductions = get_reduction_blocks(sch, blocks)
        if not reductions:
            return None
        main = reductions[0]
        stmt = sch.get(main)
        if len(stmt.reads) != self.operands or len(stmt.writes[0].region) < 3:
            return None
        loops = sch.get_loops(main)
        if len(loops) != len(stmt.iter_vars):
            return None
        extents = const_extents(sch, loops)
        if extents is None:
            return None
        spatial = [i for i, v in enumerate(stmt.iter_vars) if v.iter_type == tirx.IterVar.DataPar]
        reduce = [i for i, v in enumerate(stmt.iter_vars) if v.iter_type != tirx.IterVar.DataPar]
        vec = spatial[-1]
        if extents[vec] < MIN_WIDTH or spatial != list(range(len(spatial))):
            return None
        data = next((r for r in stmt.reads if _uses(r, stmt.iter_vars[vec].var)), None)
        if data is None:
            return None
        channel = next(
            (i for i in spatial[:-1] if extents[i] > 1 and not _uses(data, stmt.iter_vars[i].var)),
            None,
        )
        producers = [sch.get(p).name_hint for p in sch.get_producers(main)]
        bits = output_bits(sch, main)
        vw = largest_divisor(extents[vec], vector_lanes(target, bits))
        cw = largest_divisor(extents[channel], CHANNELS_PER_TILE) if channel is not None else 1

        v0, v1 = sch.split(loops[vec], [None, vw])
        outer = [loops[i] for i in spatial[:-1]]
        c1 = None
        if channel is not None:
            c0, c1 = sch.split(loops[channel], [None, cw])
            outer[spatial.index(channel)] = c0
        sch.reorder(*outer, v0, *[loops[i] for i in reduce], *([c1] if c1 else []), v1)
        if math.prod(extents) >= PARALLEL_MIN_FLOPS:  # with no channel tile a row is too small
            tasks = outer if channel is not None or len(outer) < 2 else outer[:-1]  # a task
            sch.parallel(sch.fuse(*tasks))
        if c1 is not None:
            sch.unroll(c1)
        sch.vectorize(v1)

        accumulate_in_registers(sch, main, v0, loops[reduce[0]], target)
        for name in producers:
            _parallel_spatial(sch, sch.get_sblock(name))
        return sch


def _uses(region, var: tirx.Var) -> bool:
    return any(var in collect_vars_used_in_prim_expr(r.min) for r in region.region)


def _parallel_spatial(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> None:
    loops = sch.get_loops(block)
    if len(loops) >= 2:
        sch.parallel(sch.fuse(*loops[:-1]))


class Pool(Conv):
    """Max and average pooling: the convolution rule's tile with one operand (no weights, so
    no channel axis): a vector of output columns reduced over the window in registers,
    channels in parallel (as for depthwise convolutions), the padding a separate pass. Before
    it, pools fell to the fallback rule (SqueezeNet's three max pools took a third of its
    time)."""

    name = "pool"
    operands = 1
