"""What every CPU rule shares: the base class, vector lanes, thread policy, inlining helpers."""

from __future__ import annotations

import abc

from tvm import DataType, s_tir, tirx
from tvm.s_tir.dlight.base import ScheduleRule
from tvm.s_tir.schedule import ScheduleError
from tvm.target import Target
from tvm.target.codegen import target_has_features

SERIAL_CORES = 1
PARALLEL_MIN_ELEMENTS = 16384
"""Below this many elements a parallel launch costs more than it saves."""
PARALLEL_MIN_FLOPS = 1 << 18
"""Below this many multiply-adds a matmul or convolution runs on one thread."""


def cpu_cores(target: Target) -> int:
    """The target's ``num-cores`` (kernels for a 1-core target get no parallel loops)."""
    return int(target.attrs.get("num-cores", 0) or 0)


def is_serial(target: Target) -> bool:
    """Whether kernels for ``target`` must stay single-threaded (``num-cores`` 1)."""
    return cpu_cores(target) == SERIAL_CORES


def vector_bits(target: Target) -> int:
    """Width of one vector register of ``target`` in bits.

    From the CPU's features: ``llvm_get_vector_width`` answers 512 for AVX2-only CPUs in 0.27.
    """
    for feature, bits in (("avx512f", 512), ("avx2", 256), ("avx", 256)):
        try:
            if target_has_features(feature, target):
                return bits
        except (RuntimeError, ValueError):  # not an x86 target
            break
    return 128


def vector_lanes(target: Target, dtype_bits: int) -> int:
    """Elements of ``dtype_bits`` in one vector register of ``target`` (at least 2)."""
    return max(vector_bits(target) // dtype_bits, 2)


def const_extents(sch: s_tir.Schedule, loops: list) -> list[int] | None:
    """Integer extents of ``loops``, or None when one is symbolic."""
    out = []
    for loop in loops:
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm):
            return None
        out.append(int(extent))
    return out


def output_bits(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> int:
    """Bits of the element type ``block`` writes."""
    return DataType(str(sch.get(block).writes[0].source.dtype)).bits


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit``."""
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _apply_each(primitive, blocks) -> bool:
    """Apply ``primitive`` to each block where it succeeds; whether any did."""
    changed = False
    for block in blocks:
        try:
            primitive(block)
            changed = True
        except ScheduleError:
            continue
    return changed


def inline_producers(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, keep: tuple[str, ...] = ()
) -> None:
    """Inline every producer of ``block`` that can be inlined, transitively, except ``keep``."""
    while _apply_each(
        sch.compute_inline,
        [p for p in sch.get_producers(block) if sch.get(p).name_hint not in keep],
    ):
        pass


def inline_consumers(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> None:
    """Fold every consumer of ``block`` into it, transitively.

    Consumers are first inlined forward into their own consumers (``compute_inline``), then the
    rest reverse-inlined into ``block``: reverse-inlining a block whose result is read twice
    (``x * erf(x)`` in GELU) loses one of the reads in 0.27.
    """
    while _apply_each(sch.compute_inline, _all_consumers(sch, block)) | _apply_each(
        sch.reverse_compute_inline, sch.get_consumers(block)
    ):
        pass


def accumulate_in_registers(
    sch: s_tir.Schedule, main: s_tir.schedule.SBlockRV, tile_loop, reduction_loop
) -> None:
    """Accumulate ``main``'s output tile in a local buffer under ``tile_loop``, write it back
    (vectorized, with the epilogues folded in) and initialise it outside ``reduction_loop``."""
    acc = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(acc, tile_loop, preserve_unit_loops=True)
    inline_consumers(sch, acc)
    sch.vectorize(sch.get_loops(acc)[-1])
    sch.decompose_reduction(main, reduction_loop)


def _all_consumers(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> list:
    """Every block downstream of ``block``, each once (a block reached by two paths, such as the
    last multiply of GELU, would otherwise be inlined twice: the second time it is gone)."""
    out, seen, todo = [], set(), list(sch.get_consumers(block))
    while todo:
        b = todo.pop(0)
        name = sch.get(b).name_hint
        if name in seen:
            continue
        seen.add(name)
        out.append(b)
        todo.extend(sch.get_consumers(b))
    return out


def without_parallel(sch: s_tir.Schedule, func: tirx.PrimFunc) -> s_tir.Schedule:
    """Replay ``sch``'s trace on ``func`` without its ``parallel`` steps (a serial kernel)."""
    trace = sch.trace
    keep = [inst for inst in trace.insts if inst.kind.name != "Parallel"]
    decisions = {inst: d for inst, d in trace.decisions.items() if inst in set(keep)}
    serial = s_tir.Schedule(func)
    s_tir.schedule.Trace(keep, decisions).apply_to_schedule(serial, remove_postproc=False)
    return serial


class CpuRule(ScheduleRule, abc.ABC):
    """A CPU schedule rule: ``schedule`` returns a Schedule or None; errors mean "not mine".

    Subclasses set ``name`` (how builds report which rule scheduled a kernel) and implement
    ``schedule``. Parallel loops are removed for serial targets (``num-cores`` 1).
    """

    name = "cpu"

    @abc.abstractmethod
    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        """Schedule ``func`` for ``target``, or return None if the rule does not apply."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool) -> s_tir.Schedule | None:
        """dlight's entry point: the schedule, serial when the target is."""
        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        try:
            sch = self.schedule(func, target)
        except ScheduleError:
            return None
        if sch is None or not is_serial(target):
            return sch
        return without_parallel(sch, func)

    def is_target_available(self, target: Target) -> bool:
        """LLVM (CPU) targets only."""
        return target.kind.name == "llvm"
