"""Element-wise kernels that read an input transposed: square tiles of the two axes that move,
or rows of channel vectors copied out by transposes where the read's columns are tiles."""

from __future__ import annotations

import math

from tvm import ir, s_tir, tirx
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.sym import detect_linear_equation
from tvm.sym.analyzer import Analyzer
from tvm.target import Target

from tvm_hetero.schedules.cpu.common import (
    BLOCKED_COPY_MAX_BYTES,
    IF_THEN_ELSE,
    PARALLEL_MIN_ELEMENTS,
    blocked_read,
    channels_last,
    const_extents,
    expression_nodes,
    index_step,
    is_int,
    is_serial,
    largest_divisor,
    output_bits,
    region_uses,
    uses_var,
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


BLOCKED_ROWS = True
"""Whether an element-wise block reading tiles with channels innermost writes rows of channel
vectors copied out by transposes (:func:`blocked_rows`); off, :func:`transposed_tile` takes it."""


def blocked_rows(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, target: Target) -> bool:
    """Schedule ``block`` (``[N, C, H, W]``) a row of ``L`` channels a task, vectorized along
    the channels into a buffer of the row's positions laid out ``[W, L]``, copied out to the
    output a position at a time, where it reads an input with ``C`` innermost and the
    columns ``w`` in other indices but not linearly (Winograd's tiles back as a map,
    ``y[n, c, h, w] = z[h // m * T + w // m, h % m, w % m, c]``); whether it did.

    A read of ``[N, C, H, W]`` laid out as the output (a residual, the other operand of an
    element-wise step) is copied into such a buffer of the row first. Both copies are loops of
    positions over a vector of channels, which
    :class:`~tvm_hetero.passes.BlockedCopiesAsTransposes` runs as transposes in registers
    where the row has a vector of positions or more. Tiled along ``w``
    (:func:`transposed_tile`), each vector's lanes were read a tile's row apart, a division
    and a gather a lane, at a few times a copy's time: the Winograd convolution's last kernel
    over SqueezeNet's 55 x 55 maps (64 channels, the ReLU fused) took 0.19 ms alone, 0.08 ms
    so, a copy of as many floats 0.07 (Intel Xeon, two threads).

    Left to :func:`transposed_tile`: a block that is not ``[N, C, H, W]``, channels no vector
    (or half of one, of 8 lanes or more) divides, a row narrower than those lanes or over
    :data:`BLOCKED_COPY_MAX_BYTES`, indices that are not ``int64``, and a block with another
    read along the columns (a concatenation not cut in pieces chooses among its inputs: read
    a vector of channels a position, each would be a gather; DenseNet-121's ran slower so).
    """
    if not BLOCKED_ROWS:
        return False
    stmt = sch.get(block)
    loops = sch.get_loops(block)
    extents = const_extents(sch, loops)
    if extents is None or len(loops) != 4 or len(stmt.iter_vars) != 4:
        return False
    if any(str(iv.var.ty) != "int64" for iv in stmt.iter_vars):
        return False
    _, c, h, w = (iv.var for iv in stmt.iter_vars)
    lanes = vector_lanes(target, output_bits(sch, block))
    fits = (k for k in (lanes, lanes // 2) if 8 <= k <= extents[3] and extents[1] % k == 0)
    lanes = next(fits, 0)
    row_bytes = lanes * extents[3] * output_bits(sch, block) // 8
    if not lanes or row_bytes > BLOCKED_COPY_MAX_BYTES:
        return False
    tiles = [_tiles_with_channels_innermost(region, c, w) for region in stmt.reads]
    planar = [_as_output(region, (c, h, w)) for region in stmt.reads]
    others = [
        region_uses(region, w) and not (tiled or laid_out)
        for region, tiled, laid_out in zip(stmt.reads, tiles, planar, strict=True)
    ]
    if not any(tiles) or any(others) or _chooses(stmt):
        return False  # another read along the columns, or a choice (a concatenation whole)
    copy = sch.reindex(block, ("write", 0))  # the only writer of the output: tasks anchor on it
    indices = [r.min for r in sch.get(block).writes[0].region]
    axis = next(k for k, index in enumerate(indices) if index.same_as(c))
    sch.transform_layout(block, ("write", 0), channels_last(len(indices), axis, lanes))
    *outer, channels, row, column = sch.get_loops(copy)
    c0, c1 = sch.split(channels, [None, lanes])
    sch.reorder(c0, row, column, c1)
    task = sch.fuse(*outer, c0, row)
    sch.vectorize(c1)
    sch.compute_at(block, task)
    lanes_loop, positions = sch.get_loops(block)[-2:]
    sch.reorder(positions, lanes_loop)
    sch.vectorize(lanes_loop)
    for k in sorted((k for k, p in enumerate(planar) if p), reverse=True):
        blocked_read(sch, block, k, task, lanes)
    if math.prod(extents) >= PARALLEL_MIN_ELEMENTS and not is_serial(target):
        sch.parallel(task)
    return True


def _tiles_with_channels_innermost(region, c: tirx.Var, w: tirx.Var) -> bool:
    """Whether ``region``'s innermost index is ``c`` plus what does not move with it, and
    another index uses ``w`` other than linearly (a scalar's read: no index, no tile)."""
    if not region.region:
        return False
    *rest, last = (r.min for r in region.region)
    if uses_var(last, w) or index_step(last, c) != 1:
        return False
    return any(uses_var(index, w) and index_step(index, w) is None for index in rest)


def _as_output(region, axes: tuple) -> bool:
    """Whether ``region`` reads one element at ``[n, c, h, w]`` of a 4-D buffer, ``axes`` the
    block's ``(c, h, w)``."""
    if len(region.region) != 4 or any(not is_int(r.extent, 1) for r in region.region):
        return False
    return all(r.min.same_as(v) for r, v in zip(region.region[1:], axes, strict=True))


def _chooses(stmt: s_tir.SBlock) -> bool:
    """Whether ``stmt``'s value chooses between values (``if_then_else``, ``Select``): a read
    under a choice may cover only part of the block's range."""
    value = getattr(stmt.body, "value", None)
    if value is None:
        return True
    for node in expression_nodes(value):
        if isinstance(node, tirx.Select):
            return True
        if isinstance(node, ir.expr.Call) and node.op.same_as(IF_THEN_ELSE):
            return True
    return False
