"""Element-wise and injective kernels on CPUs: the innermost axis vectorized, the rest parallel."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import CpuRule, spatial_inlined, vectorize_parallel
from tvm_hetero.schedules.cpu.transposed import blocked_rows, transposed_tile


class Injective(CpuRule):
    """Kernels whose blocks are all spatial (add, gelu, transpose, reshape, take, what the
    pieces rule leaves: concatenations of symbolic shape...).

    Producers are inlined into the outputs; each remaining block's innermost loop is
    vectorized, the others fused into parallel chunks; a block that reads an input transposed
    is cut in square tiles instead (:func:`~tvm_hetero.schedules.cpu.transposed.transposed_tile`),
    or, where it reads tiles with channels innermost (Winograd's), written a row of channel
    vectors at a time and copied out by transposes
    (:func:`~tvm_hetero.schedules.cpu.transposed.blocked_rows`).
    """

    name = "injective"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        found = spatial_inlined(func)
        if found is None:
            return None
        sch, blocks = found
        for block in blocks:
            if not (blocked_rows(sch, block, target) or transposed_tile(sch, block, target)):
                vectorize_parallel(sch, block, target)
        return sch
