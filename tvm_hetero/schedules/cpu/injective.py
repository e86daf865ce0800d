"""Element-wise and injective kernels on CPUs: the innermost axis vectorized, the rest parallel."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import CpuRule, spatial_inlined, vectorize_parallel


class Injective(CpuRule):
    """Kernels whose blocks are all spatial (add, gelu, transpose, reshape, take, what the
    pieces rule leaves: concatenations of symbolic shape...).

    Producers are inlined into the outputs; each remaining block's innermost loop is
    vectorized, the others fused into parallel chunks.
    """

    name = "injective"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        found = spatial_inlined(func)
        if found is None:
            return None
        sch, blocks = found
        for block in blocks:
            vectorize_parallel(sch, block, target)
        return sch
