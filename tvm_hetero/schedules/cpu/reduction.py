"""Row reductions on CPUs (softmax, layer norm, mean, GEMV): dlight's CPU rules, named."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import dlight
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import CpuRule


class Reduction(CpuRule):
    """dlight's ``cpu.Reduction``: parallel rows, vectorized element-wise steps, unrolled sums."""

    name = "reduction"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        return dlight.cpu.Reduction().apply(func, target, False)


class Gemv(CpuRule):
    """dlight's ``cpu.GEMV`` for matrix-vector products (one row of activations)."""

    name = "gemv"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        sch = dlight.cpu.GEMV().apply(func, target, False)
        return sch[0] if isinstance(sch, list) else sch
