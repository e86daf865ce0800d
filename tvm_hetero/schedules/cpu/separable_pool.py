"""Max pools legalized as two passes (``LegalizeWithFastMath``): rows, then columns."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_hetero.ir.attrs import SEPARABLE_POOL_ATTR
from tvm_hetero.schedules.cpu.common import CpuRule


class SeparablePool(CpuRule):
    """A kernel marked :data:`~tvm_hetero.ir.attrs.SEPARABLE_POOL_ATTR`: block ``pool_rows``
    (each input row's window maxima) and block ``pool_columns`` (the output, maxima down
    those). The ``(N, C)`` maps run in parallel; each task computes its map's row maxima (a
    map of 112 x 56 floats is 25 KiB, in L1) and then the output from them. Both loops over a
    row are left to LLVM's loop vectorizer, which reads a strided window as whole vectors and
    shuffles them (TVM's vectorizer gathers each lane): ResNet-18's 3 x 3 pool with stride 2
    over 64 x 112 x 112 ran in 58 us, TVM's kernel under the pool rule in 173 and ONNX
    Runtime in 129 (Zen 4, two threads, alone, interleaved: ``benchmarks/cpu_kernels/
    max_pools.py``)."""

    name = "separable_pool"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        if not (func.attrs and func.attrs.get(SEPARABLE_POOL_ATTR)):
            return None
        sch = s_tir.Schedule(func)
        rows, out = sch.get_sblock("pool_rows"), sch.get_sblock("pool_columns")
        batch, channel, _, _ = sch.get_loops(out)
        maps = sch.fuse(batch, channel)
        sch.parallel(maps)
        sch.compute_at(rows, maps)
        return sch
