"""What every CPU rule shares: the base class, vector lanes, thread policy, inlining helpers."""

from __future__ import annotations

import abc
import itertools
import math
from collections.abc import Iterator

from tvm import DataType, ir, s_tir, tirx
from tvm.error import InternalError
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.s_tir.dlight.base import ScheduleRule
from tvm.s_tir.schedule import ScheduleError
from tvm.sym import detect_linear_equation
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


SPLIT_LARGER = True
"""Matmuls whose threads share each panel's row tiles take bands of the larger operand
(:func:`split_first`)."""


def split_first(split_bytes: int, other_bytes: int) -> bool:
    """Whether a kernel whose threads can each take a band of one operand (``split_bytes``)
    or a block of the other (``other_bytes``) should band the first: each thread then reads
    its band of the larger operand and all of the smaller, not all of the larger (a 1x1
    convolution over a 14 x 14 map of 576 channels to 96, its 451 KB image just written by
    both cores against 221 KB of weights: 124 -> 90 us inside MobileNet-V2). Off with
    :data:`SPLIT_LARGER`."""
    return SPLIT_LARGER and split_bytes > other_bytes


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


def apply_each(primitive, blocks) -> bool:
    """Apply ``primitive`` to each block where it succeeds; whether any did.

    0.27's ``reverse_compute_inline`` fails with an internal error (a null interval) on a
    consumer that broadcasts the result over a larger domain (EfficientNet's squeeze-excite
    ``x * sigmoid(se)``): that too means "not here".
    """
    changed = False
    for block in blocks:
        try:
            primitive(block)
            changed = True
        except (ScheduleError, InternalError):
            continue
    return changed


def inline_producers(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, keep: tuple[str, ...] = ()
) -> None:
    """Inline every producer of ``block`` that can be inlined, transitively, except ``keep``."""
    while apply_each(
        sch.compute_inline,
        [p for p in sch.get_producers(block) if sch.get(p).name_hint not in keep],
    ):
        pass


def inline_consumers(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> None:
    """Fold every consumer of ``block`` into it, transitively.

    Consumers are first inlined forward into their own consumers (``compute_inline``), then the
    rest reverse-inlined into ``block``: reverse-inlining a block whose result is read twice
    (``x * erf(x)`` in GELU) loses one of the reads in 0.27. A consumer that a broadcast reads
    (the ``sigmoid`` of a squeeze-excite step, per channel, that scales a whole map) is not
    inlined forward: it would be computed again for every element of the map (EfficientNet's
    squeeze-excite scales took several times their copy's time so); it joins ``block``.
    """
    while apply_each(
        sch.compute_inline,
        [c for c in _all_consumers(sch, block) if not _read_by_a_broadcast(sch, c)],
    ) | apply_each(sch.reverse_compute_inline, sch.get_consumers(block)):
        pass


def _read_by_a_broadcast(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> bool:
    """Whether a consumer of ``block`` runs over more points than ``block`` does."""
    points = _points(sch, block)
    return points is not None and any(
        (more := _points(sch, c)) is not None and more > points for c in sch.get_consumers(block)
    )


def _points(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> int | None:
    extents = [v.dom.extent for v in sch.get(block).iter_vars]
    if not all(isinstance(e, tirx.IntImm) for e in extents):
        return None
    return math.prod(int(e) for e in extents)


def accumulate_in_registers(
    sch: s_tir.Schedule,
    main: s_tir.schedule.SBlockRV,
    tile_loop,
    reduction_loop,
    target: Target,
    unrolled: bool = False,
    vector_axis: int | None = None,
) -> s_tir.schedule.SBlockRV:
    """Accumulate ``main``'s output tile in a local buffer under ``tile_loop``, write it back
    (vectorized, with the epilogues folded in) and initialise it outside ``reduction_loop``.
    An epilogue that cannot be folded in (one that broadcasts the result over a larger
    domain) stays a loop nest of its own, vectorized and parallel. ``unrolled``: the loops
    that write the tile back are unrolled too, so that a tile of several rows whose last
    vector is cropped (a ``T.where``) stays in registers; left as loops, LLVM kept such a
    tile in memory and gathered it back. ``vector_axis``: the write-back runs with that
    dimension of the output innermost and vectorized, not the last (a tile whose vector is
    a run of channels, one position wide). Returns the block that writes the tile back."""
    acc = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(acc, tile_loop, preserve_unit_loops=True)
    inline_consumers(sch, acc)
    loops = sch.get_loops(acc)
    if vector_axis is not None:
        own = loops[-len(sch.get(acc).iter_vars) :]
        sch.reorder(*[loop for k, loop in enumerate(own) if k != vector_axis], own[vector_axis])
        loops = sch.get_loops(acc)
    sch.vectorize(loops[-1])
    if unrolled:
        tile = sch.get(tile_loop)
        below = next(k for k, loop in enumerate(loops) if sch.get(loop).same_as(tile)) + 1
        for loop in loops[below:-1]:
            sch.unroll(loop)
    sch.decompose_reduction(main, reduction_loop)
    for block in _all_consumers(sch, acc):
        if is_spatial(sch, block):
            vectorize_parallel(sch, block, target)
    return acc


def is_spatial(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> bool:
    """Whether every iterator of ``block`` is data-parallel (no reduction)."""
    return all(v.iter_type == tirx.IterVar.DataPar for v in sch.get(block).iter_vars)


ROWS_OF_VECTORS = True
"""Whether a run of memory whose vectors would cross rows inside a map is vectorized a row at
a time instead (:func:`crosses_rows`)."""


def crosses_rows(extents: list[int], lanes: int) -> bool:
    """Whether a kernel whose axes of ``extents`` are one run of memory (a piece of a
    concatenation, ``pieces``) is vectorized along its rows alone (:data:`ROWS_OF_VECTORS`):
    ``lanes`` divide each map (its last two axes) but not its rows, which are at least a vector
    wide, so a vector of the fused run stays in one map and crosses rows, and the row's largest
    divisor up to ``lanes`` is at least half of them. LLVM computed such a vector's columns
    with a vector remainder and read and wrote it lane by lane: VoVNet's concatenation of 448
    channels over 56 x 56 took 0.9-1.2 ms (ONNX Runtime 0.28), over 28 x 28 0.36-0.44; along
    rows of 14 lanes 0.20-0.34 and 0.06-0.08 (Intel Xeon, two threads; a replay of its kernels
    as ``benchmarks/models/kernels_inside.py`` makes), the model 8 % faster
    (``before_and_now.py``). Built for AVX2 (8 lanes: 28 x 28 in rows of 7) and run on the
    same host, that concatenation over 28 x 28 took 510 us and 163 in rows (a scratch probe,
    the call's output allocated each time). A vector that crosses maps too (SqueezeNet's
    55 x 55, 14 x 14) is not made so: rows of 11 lanes ran slower than it."""
    if not ROWS_OF_VECTORS or len(extents) < 2:
        return False
    width, area = extents[-1], extents[-1] * extents[-2]
    if width < lanes or width % lanes == 0 or area % lanes:
        return False
    return largest_divisor(width, lanes) >= lanes // 2


def vectorize_parallel(
    sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, target: Target, start: int | None = None
) -> None:
    """Vectorize ``block``'s innermost loop and run the rest, fused, in parallel (serially on
    a serial target, which a rule that schedules a function of its own cannot leave to
    :meth:`CpuRule.apply`'s replay).

    The vector is cut from the innermost axis alone (its largest divisor up to the CPU's
    lanes), never from all loops fused: a vector of the fused loop that may cross a row
    (a width of 28 with 8 lanes) leaves every lane a division and a gather, and a broadcast add
    of ``(1, 64, 56, 28)`` ran 4.3x slower than the fix (AVX2: 8 lanes do not divide 28).
    ``start``: the axes from it inward are fused into the vectorized loop instead, where the
    caller knows they are one run of memory in every buffer (``pieces``).
    """
    loops = sch.get_loops(block)
    extents = const_extents(sch, loops)
    if not loops or extents is None:
        return
    # trailing unit loops (the H and W of a (1, C, 1, 1) bias) join the last real axis
    last = max((k for k, e in enumerate(extents) if e > 1), default=len(loops) - 1)
    first = last if start is None else start
    if start is not None and crosses_rows(extents, vector_lanes(target, output_bits(sch, block))):
        first = last
    inner = sch.fuse(*loops[first:]) if first < len(loops) - 1 else loops[-1]
    outer = loops[:first]
    run = math.prod(extents[first:])
    lanes = largest_divisor(run, vector_lanes(target, output_bits(sch, block)))
    if lanes > 1:
        inner, vec = sch.split(inner, [None, lanes])
        sch.vectorize(vec)
    outer.append(inner)
    if math.prod(extents) >= PARALLEL_MIN_ELEMENTS and not is_serial(target):
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])


SHARED_INLINE_MAX_NODES = 1024
"""The largest expression (in nodes) that :func:`spatial_inlined` copies into more than one
reader. Inlining copies a block's expression into each reader, so a concatenation read by
the pieces of a split, each then read by another concatenation, grows with the product of
the two: timm's BAT-ResNeXt's twelve attention kernels (a reshape split eight ways,
concatenated, split and concatenated again) took seven seconds each to inline whole, the
model's compile 93 s, 11 s with the first concatenation (2,866 nodes read by eight pieces)
written to its buffer once and read from there (AMD EPYC Zen 4, 2026-12-07). Blocks of a few
hundred nodes (the reshape read by the eight pieces: 311) are inlined as before; no kernel of
the corpus's models has a larger one."""


def _copied_too_large(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> bool:
    """Whether inlining ``block`` would copy more than :data:`SHARED_INLINE_MAX_NODES`
    expression nodes into more than one reader."""
    if len(sch.get_consumers(block)) < 2:
        return False
    store = sch.get(block).body
    if not isinstance(store, tirx.BufferStore):
        return False
    nodes = itertools.islice(expression_nodes(store.value), SHARED_INLINE_MAX_NODES + 1)
    return sum(1 for _ in nodes) > SHARED_INLINE_MAX_NODES


def spatial_inlined(func: tirx.PrimFunc) -> tuple[s_tir.Schedule, list] | None:
    """A schedule of ``func`` with every block but the last inlined into its readers where it
    can be (a large expression into one reader only: :data:`SHARED_INLINE_MAX_NODES`), and the
    blocks left; ``None`` when a block reduces (not an element-wise kernel)."""
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    if not blocks or any(not is_spatial(sch, b) for b in blocks):
        return None
    for block in blocks[:-1]:
        if _copied_too_large(sch, block):
            continue
        try:
            sch.compute_inline(block)
        except ScheduleError:
            continue
    return sch, list(sch.get_child_blocks(sch.get_sblock("root")))


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


def _parallel_steps(sch: s_tir.Schedule) -> bool:
    """Whether ``sch``'s trace runs a loop in parallel."""
    return any(inst.kind.name == "Parallel" for inst in sch.trace.insts)


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
        if sch is None or not is_serial(target) or not _parallel_steps(sch):
            return sch  # (a rule that leaves a serial target's loops serial is not replayed)
        return without_parallel(sch, func)

    def is_target_available(self, target: Target) -> bool:
        """LLVM (CPU) targets only."""
        return target.kind.name == "llvm"


BLOCKED_COPY_MAX_BYTES = 32 * 1024
"""The largest buffer of a task's positions a blocked copy makes (a stack slot): the
convolution rule's ``BLOCKED_COPIES``, ``transposed.blocked_rows``."""


def positions_by_vectors(sch: s_tir.Schedule, block, task) -> None:
    """``block``'s loops below ``task`` (a blocked copy computed there: its rows and columns,
    or a row's columns, then the lanes) with the rows and columns fused and the lanes
    vectorized."""
    loops = sch.get_loops(block)
    inside = next(k + 1 for k, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(task)))
    own = loops[inside:]
    if len(own) >= 3:
        sch.fuse(own[-3], own[-2])
    sch.vectorize(sch.get_loops(block)[-1])


def channels_last(ndim: int, axis: int, lanes: int) -> tirx.IndexMap:
    """The layout of ``ndim`` axes with axis ``axis`` cut into blocks of ``lanes``, the lanes
    innermost: ``[N, C, H, W] -> [N, C / L, H, W, L]`` for ``axis`` 1."""

    def blocked(*i):
        return (*i[:axis], i[axis] // lanes, *i[axis + 1 :], i[axis] % lanes)

    return tirx.IndexMap.from_func(blocked, ndim=ndim)


IF_THEN_ELSE = ir.Op.get("prim.if_then_else")
"""TIR's conditional expression (a concatenation's or a pad's choice)."""
EXPRESSION_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value", "args", "indices")
"""The fields of a TIR expression :func:`expression_nodes` walks into."""


def expression_nodes(expr) -> Iterator:
    """``expr`` and every expression inside it (the pinned TVM has no TIR visitor in Python)."""
    yield expr
    for field in EXPRESSION_FIELDS:
        child = getattr(expr, field, None)
        if isinstance(child, ir.expr.Expr):
            yield from expression_nodes(child)
        elif field in ("args", "indices") and child is not None:
            for item in child:
                yield from expression_nodes(item)


def index_step(index, var: tirx.Var) -> int | None:
    """How far ``index`` moves per step of ``var``, or ``None`` when not a constant multiple."""
    found = detect_linear_equation(index, [var])
    return int(found[0]) if len(found) == 2 and isinstance(found[0], tirx.IntImm) else None


def uses_var(expr: tirx.PrimExpr, var: tirx.Var) -> bool:
    """Whether ``expr`` involves ``var``."""
    return var in collect_vars_used_in_prim_expr(expr)


def region_uses(region, var: tirx.Var) -> bool:
    """Whether any index of the buffer ``region`` involves ``var``."""
    return any(uses_var(r.min, var) for r in region.region)


def is_int(expr: tirx.PrimExpr, value: int) -> bool:
    """Whether ``expr`` is the integer constant ``value``."""
    return isinstance(expr, tirx.IntImm) and int(expr) == value


def blocked_read(sch: s_tir.Schedule, block, index: int, task, lanes: int):
    """A copy of ``block``'s read ``index`` (an ``[N, C, H, W]`` map) laid out ``[N, C / L, H,
    W, L]`` (``lanes`` channels innermost), computed in ``task`` as a loop of positions over a
    vector of channels (:class:`~tvm_hetero.passes.BlockedCopiesAsTransposes` runs it as
    transposes); the copy's block."""
    blocked = channels_last(4, 1, lanes)
    read = sch.cache_read(block, index, "global")
    sch.transform_layout(read, ("write", 0), blocked)
    sch.transform_block_layout(read, blocked)
    sch.compute_at(read, task)
    positions_by_vectors(sch, read, task)
    return read
