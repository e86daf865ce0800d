"""Concatenations (and what is fused after them) on CPUs: one block per input, each a copy of
contiguous memory."""

from __future__ import annotations

import itertools
import math

from tvm import ir, s_tir, tirx
from tvm.sym.analyzer import Analyzer
from tvm.target import Target

from tvm_hetero.ir.sblocks import substituted
from tvm_hetero.schedules.cpu.common import (
    IF_THEN_ELSE,
    CpuRule,
    expression_nodes,
    largest_divisor,
    output_bits,
    spatial_inlined,
    uses_var,
    vector_lanes,
    vectorize_parallel,
)
from tvm_hetero.schedules.cpu.transposed import blocked_rows, transposed_tile


class Pieces(CpuRule):
    """An element-wise kernel whose value is chosen piece by piece along its axes (TOPI's
    ``concatenate``: ``if_then_else(64 <= c, b[c - 64], a[c])``; ``pad``: ``if_then_else(h <
    112 and w < 112, a[h, w], 0)``), computed as one block per piece, where the choice is
    known.

    As one block, every vector of the output evaluated the choice, and its lanes were a
    divisor of the innermost width (11 of SqueezeNet's 55): its concatenations ran about level
    with ONNX Runtime's, and 0.5-0.86x its time in pieces. In a piece the condition folds away, and
    where every read is indexed as the output is from the chosen axis inward (a copy, or an
    element-wise step after one), the axes from there inward are one run of memory, cut into
    whole vectors (``benchmarks/cpu_kernels/concatenations.py``). A pad chooses over two axes
    (a piece for each pair of intervals, :data:`MAX_PIECES` at most): as one block, HGNetV2's
    pad of 16 x 112 x 112 to 113 x 113 (its stem's, read by a convolution and a pool) had no
    vector (no lanes divide 113) and every element a division of the fused index, 209 us,
    ONNX Runtime fusing it into the pool; in pieces 37 us. Where the output's rows take vectors
    of half the lanes or more, one block stays (a pad of 28 x 28 by two to 32 x 32: 3 us, in
    nine pieces 19). The numbers are the same.

    Notes
    -----
    Tried before :class:`~tvm_hetero.schedules.cpu.injective.Injective`: all-spatial
    kernels whose blocks inline into one, static extents, thresholds that are constants.
    The schedule is of a new function with the same parameters (its trace does not replay on
    the kernel: ``build.tuning`` keeps only seeds that do).
    """

    name = "pieces"

    def schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        found = spatial_inlined(func)
        if found is None or len(found[1]) != 1:
            return None
        sch, (block,) = found
        inlined = sch.mod["main"]
        found = _cut(sch.get(block))
        if found is None:
            return None
        if len(found) > 1 and not _across_axes(sch, block, target):
            return None
        axes = [axis for axis, _ in found]
        pieces = [
            _piece(sch.get(block), dict(zip(axes, ranges, strict=True)), k)
            for k, ranges in enumerate(itertools.product(*(bounds for _, bounds in found)))
        ]
        out = s_tir.Schedule(inlined.with_body(_with_root(inlined, pieces)))
        for piece in out.get_child_blocks(out.get_sblock("root")):
            start = _run_from(out.get(piece), axes[-1])
            if start is not None or not (
                blocked_rows(out, piece, target) or transposed_tile(out, piece, target)
            ):
                vectorize_parallel(out, piece, target, start=start)
        return out


MAX_PIECES = 16
"""The most pieces the rule cuts a kernel into (a pad of four sides of two axes: 9)."""
ACROSS_AXES = True
"""Whether the rule cuts a choice over several axes (a pad); off, one axis alone (to
compare: ``benchmarks/models/before_and_now.py``)."""


def _cut(block: s_tir.SBlock) -> list[tuple[int, list[tuple[int, int]]]] | None:
    """Each axis whose constant thresholds choose ``block``'s value, outermost first, with
    its intervals; ``None`` where a choice is not of that kind or nothing is cut."""
    store = block.body
    names = [iv.var for iv in block.iter_vars]
    if not isinstance(store, tirx.BufferStore) or len(store.indices) != len(names):
        return None
    if any(not i.same_as(v) for i, v in zip(store.indices, names, strict=True)):
        return None
    extents = [iv.dom.extent for iv in block.iter_vars]
    if any(not isinstance(e, tirx.IntImm) for e in extents):
        return None
    thresholds: dict[int, set[int]] = {}
    for node in expression_nodes(store.value):
        if isinstance(node, ir.expr.Call) and node.op.same_as(IF_THEN_ELSE):
            found = _thresholds(node.args[0], names)
            if found is None:
                return None
            for axis, t in found:
                thresholds.setdefault(axis, set()).add(t)
    cuts = []
    for axis in sorted(thresholds):
        extent = int(extents[axis])
        points = sorted({0, extent, *(t for t in thresholds[axis] if 0 < t < extent)})
        if len(points) >= 3:
            cuts.append((axis, list(itertools.pairwise(points))))
    if not cuts or math.prod(len(bounds) for _, bounds in cuts) > MAX_PIECES:
        return None
    return cuts


def _across_axes(sch: s_tir.Schedule, block, target: Target) -> bool:
    """Whether a choice over several axes is cut (:data:`ACROSS_AXES`): only where one block
    would choose per vector of under half the lanes (a width no wide vector divides)."""
    width = int(sch.get(block).iter_vars[-1].dom.extent)
    lanes = vector_lanes(target, output_bits(sch, block))
    return ACROSS_AXES and 2 * largest_divisor(width, lanes) < lanes


def _thresholds(cond, names: list) -> list[tuple[int, int]] | None:
    """Every ``(axis, t)`` of :func:`_threshold` in ``cond``, a comparison or comparisons
    joined by ``and`` / ``or``; ``None`` where a part is neither."""
    if isinstance(cond, (tirx.And, tirx.Or)):
        left, right = _thresholds(cond.a, names), _thresholds(cond.b, names)
        return None if left is None or right is None else left + right
    found = _threshold(cond, names)
    return None if found is None else [found]


def _threshold(cond, names: list) -> tuple[int, int] | None:
    """``(axis, t)`` for a comparison of a block variable ``v`` with a constant (``t <= v``,
    ``v < t``, ``v <= t - 1``, ...): the condition's value changes where ``v`` reaches ``t``."""
    if not isinstance(cond, (tirx.LT, tirx.LE, tirx.GT, tirx.GE)):
        return None
    var_left = isinstance(cond.a, tirx.Var)
    var, const = (cond.a, cond.b) if var_left else (cond.b, cond.a)
    if not isinstance(const, tirx.IntImm) or not isinstance(var, tirx.Var):
        return None
    inclusive = (
        isinstance(cond, (tirx.LE, tirx.GT)) if var_left else isinstance(cond, (tirx.LT, tirx.GE))
    )  # v <= t, v > t, t < v, t >= v: from t + 1 on
    for k, v in enumerate(names):
        if var.same_as(v):
            return k, int(const.value) + int(inclusive)
    return None


def _piece(block: s_tir.SBlock, ranges: dict[int, tuple[int, int]], k: int) -> tirx.Stmt:
    """``block`` over ``lo <= v < hi`` on each axis of ``ranges`` (its ``k``-th piece) as a
    loop nest of its own variables, its choice folded."""
    analyzer, iters, values = Analyzer(), [], {}
    for j, iv in enumerate(block.iter_vars):
        dtype = str(iv.var.ty)
        var = tirx.Var(str(iv.var.name), iv.var.ty)
        dom = iv.dom
        lo, hi = ranges.get(j, (0, 0))
        if j in ranges:
            dom = ir.Range.from_min_extent(tirx.const(0, dtype), tirx.const(hi - lo, dtype))
        iters.append(tirx.IterVar(dom, var, iv.iter_type))
        analyzer.bind(var, dom)
        values[iv.var] = var + tirx.const(lo, dtype) if j in ranges else var
    store = block.body
    value = analyzer.simplify(substituted(store.value, values))
    indices = [analyzer.simplify(substituted(i, values)) for i in store.indices]
    body = tirx.BufferStore(store.buffer, value, indices)
    buffers = {load.source: load.source for load in _loads(value)}
    buffers[store.buffer] = store.buffer
    name = f"{block.name_hint}_{k}"
    piece = s_tir.SBlock(iters, [], [], name, body)
    reads, writes = s_tir.analysis.get_sblock_read_write_region(piece, buffers)
    piece = s_tir.SBlock(iters, reads, writes, name, body)
    loops = [tirx.Var(f"ax{j}", iv.var.ty) for j, iv in enumerate(iters)]
    nest: tirx.Stmt = s_tir.SBlockRealize(loops, True, piece)
    for loop, iv in reversed(list(zip(loops, iters, strict=True))):
        nest = tirx.For(loop, iv.dom.min, iv.dom.extent, tirx.ForKind.SERIAL, nest)
    return nest


def _with_root(func: tirx.PrimFunc, pieces: list[tirx.Stmt]) -> tirx.Stmt:
    """``func``'s root block holding ``pieces`` in order."""
    root = func.body.block
    block = s_tir.SBlock([], [], [], root.name_hint, tirx.SeqStmt(pieces),
                         alloc_buffers=root.alloc_buffers)  # fmt: skip
    return s_tir.SBlockRealize([], True, block)


def _run_from(block: s_tir.SBlock, axis: int) -> int | None:
    """The outermost axis ``d`` (from the innermost chosen ``axis`` inward) such that the
    axes from ``d`` inward are one run of memory in the output and in every buffer read, for
    given outer indices: each read is indexed as the output there (on ``axis`` a constant
    shift is allowed) with the output's extents inside ``d``, or does not vary there (a
    per-channel scale); ``None`` when not even the innermost axis is."""
    names = [iv.var for iv in block.iter_vars]
    for d in range(axis, len(names)):
        if all(_runs(load, block.body.buffer, names, d, axis) for load in _loads(block.body.value)):
            return d
    return None


def _runs(load, out: tirx.Buffer, names: list, d: int, axis: int) -> bool:
    """Whether ``load`` reads one run of memory as the output's axes from ``d`` inward run."""
    inner = names[d:]
    uses = [any(uses_var(i, v) for v in inner) for i in load.indices]
    if not any(uses):
        return True  # the same element for the whole run
    if len(load.indices) < len(inner):
        return False
    analyzer = Analyzer()
    for j, var in enumerate(reversed(inner), start=1):
        shift = analyzer.simplify(load.indices[-j] - var)
        if not isinstance(shift, tirx.IntImm):
            return False
        if j == len(inner) and d == axis:
            continue  # the chosen axis: a shift into the piece's input
        if int(shift.value) != 0:
            return False
        if j < len(inner) and not analyzer.can_prove_equal(load.source.shape[-j], out.shape[-j]):
            return False
    return not any(uses[: len(load.indices) - len(inner)])


def _loads(expr) -> list[ir.expr.TensorLoad]:
    return [node for node in expression_nodes(expr) if isinstance(node, ir.expr.TensorLoad)]
