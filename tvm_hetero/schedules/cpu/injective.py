"""Element-wise and injective kernels on CPUs: the innermost axis vectorized, the rest parallel."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import CpuRule, is_spatial, vectorize_parallel


class Injective(CpuRule):
    """Kernels whose blocks are all spatial (add, gelu, transpose, reshape, concat, take...).

    Producers are inlined into the outputs; each remaining block's innermost loop is
    vectorized, the others fused into parallel chunks.
    """

    name = "injective"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        if not blocks or any(not is_spatial(sch, b) for b in blocks):
            return None
        for block in blocks[:-1]:
            try:
                sch.compute_inline(block)
            except ScheduleError:
                continue
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            vectorize_parallel(sch, block, target)
        return sch
