"""Element-wise and injective kernels on CPUs: one fused loop, vectorized, parallel."""

from __future__ import annotations

import math

from tvm import s_tir, tirx
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import (
    PARALLEL_MIN_ELEMENTS,
    CpuRule,
    const_extents,
    output_bits,
    vector_lanes,
)


class Injective(CpuRule):
    """Kernels whose blocks are all spatial (add, gelu, transpose, reshape, concat, take...).

    Producers are inlined into the outputs; each remaining block's loops are fused into one,
    split into vectors of the CPU's width (when the size divides) and parallel chunks.
    """

    name = "injective"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        if not blocks or any(not _is_spatial(sch, b) for b in blocks):
            return None
        for block in blocks[:-1]:
            try:
                sch.compute_inline(block)
            except ScheduleError:
                continue
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            vectorize_parallel(sch, block, target)
        return sch


def vectorize_parallel(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, target: Target) -> None:
    """Fuse ``block``'s loops, vectorize the inner part and run the outer part in parallel."""
    loops = sch.get_loops(block)
    extents = const_extents(sch, loops)
    if not loops or extents is None:
        return
    total = math.prod(extents)
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    lanes = vector_lanes(target, output_bits(sch, block))
    if total % lanes == 0 and total >= lanes:
        fused, vec = sch.split(fused, [None, lanes])
        sch.vectorize(vec)
    if total >= PARALLEL_MIN_ELEMENTS:
        sch.parallel(fused)


def _is_spatial(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> bool:
    return all(v.iter_type == tirx.IterVar.DataPar for v in sch.get(block).iter_vars)
