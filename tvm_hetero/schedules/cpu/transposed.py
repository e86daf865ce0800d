"""Element-wise kernels that read an input transposed: square tiles of the two axes that move."""

from __future__ import annotations

import math

from tvm import ir, s_tir, tirx
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.sym import detect_linear_equation
from tvm.sym.analyzer import Analyzer
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import (
    PARALLEL_MIN_ELEMENTS,
    const_extents,
    is_serial,
    largest_divisor,
    output_bits,
    vector_lanes,
)

MIN_TILE_LANES = 4
"""The fewest elements of a tile's side: below it the kernel is vectorized as any other."""


def transposed_tile(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, target: Target) -> bool:
    """Schedule ``block`` in square tiles where it reads an input transposed; whether it did.

    A read is transposed where the output's innermost axis ``w`` is not in the read's innermost
    index and another output axis ``c`` is, one element a step: a transformer's tokens laid back
    out as a map, ``y[n, c, h, w] = x[n, h * W + w, c]``, or a map read as tokens, ``y[n, s, c]
    = x[n, c, s // W, s % W]`` (a tile's steps then stay in one row of the map); a write
    likewise (TVM's ``layout_transform`` loops over its input: NCHW to NCHW{B}c and back).
    Vectorized along ``w`` alone, each vector of the output reads one element of as many lines
    of ``x``, and the loops around it sweep the whole of ``x`` before they come back for the
    next element of those lines (tokens to a map), or touch a page of ``x`` for every lane (a
    map to tokens). Here ``c`` and ``w`` are cut in tiles of a vector's lanes and the tile's
    ``c`` taken inside the ``w`` tile loop: its lines of ``x`` are read from L1 for the
    ``lanes`` vectors of the tile, each vector still written whole. SegFormer-B0's transposes
    from tokens to maps (128 channels over 128 x 128) took 6.6-7.0 ms in a whole run against 1.2
    ms for ONNX Runtime's (Intel Xeon, two threads, ``benchmarks/models/kernels_inside.py``).

    Parameters
    ----------
    sch : tvm.s_tir.Schedule
        The schedule, ``block`` one of its spatial blocks with one loop per iterator.
    block : tvm.s_tir.schedule.SBlockRV
        The block (its producers inlined).
    target : tvm.target.Target
        The CPU (its vector lanes; a serial target gets no parallel loop).

    Returns
    -------
    bool
        True when the tiles were made; False leaves the schedule untouched.
    """
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    extents = const_extents(sch, loops)
    if extents is None or len(loops) != len(stmt.iter_vars) or len(loops) < 2:
        return False
    inner = max((k for k, e in enumerate(extents) if e > 1), default=-1)
    lanes = vector_lanes(target, output_bits(sch, block))
    w_lanes = largest_divisor(extents[inner], lanes) if inner >= 1 else 0
    found = _across_axis(stmt, inner, extents, lanes) if w_lanes >= MIN_TILE_LANES else None
    if found is None:
        return False
    across, c_lanes = found
    c0, c1 = sch.split(loops[across], [None, c_lanes])
    w0, w1 = sch.split(loops[inner], [None, w_lanes])
    outer = [c0 if k == across else loop for k, loop in enumerate(loops[:inner])]
    sch.reorder(*outer, w0, c1, w1)
    sch.vectorize(w1)
    if math.prod(extents) >= PARALLEL_MIN_ELEMENTS and not is_serial(target):
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    return True


def _across_axis(
    stmt: s_tir.SBlock, inner: int, extents: list[int], lanes: int
) -> tuple[int, int] | None:
    """The axis a transposed read (or write) of ``stmt`` walks one element a step in its
    innermost index while the block's ``inner`` axis is not there, and the tile's side along
    it: the largest divisor up to ``lanes`` of the axis' extent, or of its greatest common
    divisor with ``k`` where the index is ``axis % k`` (tokens read from a map's columns,
    ``x[n, c, s // W, s % W]``); ``None`` where no read is one."""
    w = stmt.iter_vars[inner].var
    analyzer = Analyzer()  # a fused reshape's index: ((h * W + w) // (H * W) + c) % C is c
    for iv in stmt.iter_vars:
        analyzer.bind(iv.var, ir.Range.from_min_extent(iv.dom.min, iv.dom.extent))
    for region in [*stmt.reads, *stmt.writes]:  # TVM's layout_transform loops over its input
        if not region.region:
            continue
        last = analyzer.simplify(region.region[-1].min)
        used = collect_vars_used_in_prim_expr(last)
        if w in used:
            continue
        period = None
        if isinstance(last, tirx.FloorMod) and isinstance(last.b, tirx.IntImm):
            last, period = last.a, int(last.b)
        for k in range(inner):
            var = stmt.iter_vars[k].var
            run = extents[k] if period is None else math.gcd(extents[k], period)
            side = largest_divisor(run, lanes)
            if var not in used or side < MIN_TILE_LANES:
                continue
            found = detect_linear_equation(last, [var])
            if len(found) == 2 and isinstance(found[0], tirx.IntImm) and int(found[0]) == 1:
                return k, side
    return None
