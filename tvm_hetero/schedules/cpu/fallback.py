"""The CPU rule of last resort: run the leading spatial loops of each block in parallel."""

from __future__ import annotations

import math

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import PARALLEL_MIN_ELEMENTS, CpuRule, const_extents


class Fallback(CpuRule):
    """Any kernel: for each top-level block, fuse its leading spatial loops and parallelize them.

    Reductions keep their order (so results match the default build bit for bit); only the
    independent outer iterations are spread over the cores.
    """

    name = "fallback"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = s_tir.Schedule(func)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            loops = sch.get_loops(block)
            iters = sch.get(block).iter_vars
            if len(loops) != len(iters):
                continue
            lead = 0
            while lead < len(iters) and iters[lead].iter_type == tirx.IterVar.DataPar:
                lead += 1
            extents = const_extents(sch, loops[:lead])
            if not lead or extents is None:
                continue
            total = math.prod(extents)
            work = total * max(1, math.prod(const_extents(sch, loops[lead:]) or [1]))
            if total > 1 and work >= PARALLEL_MIN_ELEMENTS:
                sch.parallel(sch.fuse(*loops[:lead]) if lead > 1 else loops[0])
        return sch
