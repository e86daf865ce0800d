"""BlockedCopiesAsTransposes: a CPU kernel's copy between a planar layout (``[C, P]``) and one
with a vector of channels innermost (``[P, L]``), ``L`` positions at a time, by whole-vector
reads, a transpose in registers and whole-vector writes."""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import IRModule
from tvm.ir.expr import TensorLoad
from tvm.sym.analyzer import Analyzer

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.lowered_loops import bound_values, linear_in, statements
from tvm_hetero.ir.sblocks import substituted, with_prim_funcs
from tvm_hetero.passes.stack_loop_buffers import rewritten_cpu_loops

LANES = (8, 16)
"""The vector widths a copy is transposed at (a power of two: the transpose's stages halve it)."""


@tvm.transform.module_pass(opt_level=0, name="BlockedCopiesAsTransposes")
class BlockedCopiesAsTransposes:
    """Run each CPU kernel's loop that copies ``P`` positions of ``L`` channels between a
    planar buffer (a channel's positions consecutive, channels ``S`` apart) and a blocked one
    (a position's ``L`` channels one vector) as ``P // L`` transposes of ``L x L``: ``L``
    whole-vector reads, ``L log2 L`` two-vector shuffles, ``L`` whole-vector writes; the last
    ``P % L`` positions as before.

    TVM's LLVM code generator reads a vector of channels from a planar buffer a lane at a time
    (a scalar load and an insert a lane: about twenty instructions for 16 floats with AVX-512)
    and writes one to it a lane at a time (an extract and a store a lane). A depthwise
    convolution's channel-vectorized tile over a 7 x 7 map reads and writes every position so:
    those were most of its instructions.

    The loop is ``for p in range(P): dst[Ramp(d + p * L, 1, L)] = src[Ramp(s + p, S, L)]`` (a
    read of the planar buffer, a gather) or ``dst[Ramp(d + p, S, L)] = src[Ramp(s + p * L, 1,
    L)]`` (a write to it, a scatter), the blocked side possibly a buffer of ``L``-lane vectors
    indexed ``d + p``; ``L`` in :data:`LANES`, ``L <= P <= S`` (no element written twice), two
    buffers, the value the read itself. The same elements get the same values; numbers are
    unchanged.

    Notes
    -----
    Runs on the lowered TIR of the build's host functions, where vectorized loops have become
    ``Ramp`` indices (:func:`~tvm_hetero.build.multi_device.tir_pipeline`, before
    ``StridedLoadsAsShuffles``); only under ``device_type`` CPU. The schedules make such loops
    where they lay a vector of channels innermost
    (:func:`~tvm_hetero.schedules.cpu.conv.blocked_input`,
    :func:`~tvm_hetero.schedules.cpu.conv.blocked_output`).
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with its CPU kernels' blocked copies transposed (``mod`` if none
        is)."""
        return with_prim_funcs(mod, transposed)


def transposed(func: PrimFunc) -> PrimFunc:
    """``func`` with its blocked copies under ``device_type`` CPU run as transposes."""
    return rewritten_cpu_loops(func, lambda loop, _outer: as_transposes(loop))


def _access(buffer, index) -> tuple[tirx.PrimExpr, int, int, int] | None:
    """``(base, stride, lanes, step)`` of a vector access of ``buffer`` at ``index``: a
    ``Ramp`` of constant stride and lanes (``step`` 1: an element an index), or a scalar index
    into a buffer of vectors (TVM's lowering makes a task's buffer so: stride 1, ``step`` the
    vector's lanes, an element being ``step`` lanes)."""
    if isinstance(index, tirx.Ramp):
        if not isinstance(index.stride, tirx.IntImm) or not isinstance(index.lanes, tirx.IntImm):
            return None
        return index.base, int(index.stride), int(index.lanes), 1
    lanes = tvm.DataType(str(buffer.dtype)).lanes
    return (index, 1, lanes, lanes) if lanes > 1 else None


def _index(base, access: tuple) -> tirx.PrimExpr:
    """The index of a vector of consecutive elements from ``base`` in an access like
    ``access`` (:func:`_access`)."""
    lanes, step = access[2], access[3]
    return base if step > 1 else tirx.Ramp(base, 1, lanes)


def as_transposes(loop: tirx.For) -> tirx.Stmt | None:
    """``loop`` as transposes (:class:`BlockedCopiesAsTransposes`), or ``None`` where it is
    not a blocked copy."""
    *lets, store = statements(loop.body)
    if loop.kind != tirx.ForKind.SERIAL or not isinstance(store, tirx.BufferStore):
        return None
    load = store.value
    if not isinstance(load, TensorLoad) or load.source.same_as(store.buffer):
        return None
    if len(store.indices) != 1 or len(load.indices) != 1:
        return None
    if not isinstance(loop.extent, tirx.IntImm) or not isinstance(loop.min, tirx.IntImm):
        return None
    dst, src = _access(store.buffer, store.indices[0]), _access(load.source, load.indices[0])
    if dst is None or src is None or dst[2] != src[2] or dst[2] not in LANES:
        return None
    values = bound_values(lets)  # common subexpressions bound in the loop: in the indices
    if values is None:
        return None
    var, lanes, count = loop.loop_var, dst[2], int(loop.extent)
    d, s = linear_in(substituted(dst[0], values), var), linear_in(substituted(src[0], values), var)
    if d is None or s is None:
        return None
    # per position: the blocked side moves a vector (L elements, or one of a buffer of
    # vectors), the planar side one element, its lanes a channel apart
    if d[0] * dst[3] == lanes and dst[1] == 1 and (s[0], src[3]) == (1, 1):
        planar, stride, gather = (s, src), src[1], True
    elif s[0] * src[3] == lanes and src[1] == 1 and (d[0], dst[3]) == (1, 1):
        planar, stride, gather = (d, dst), dst[1], False
    else:
        return None
    if not lanes <= count <= stride:
        return None
    blocked = (d, dst) if gather else (s, src)
    q = tirx.Var("q", var.ty)
    first = q * lanes + loop.min
    analyzer = Analyzer()

    def planar_at(position, channel: int):
        base = analyzer.simplify(planar[0][1] + position + channel * stride)
        return [tirx.Ramp(base, 1, lanes)]

    def blocked_at(position):
        (coefficient, rest), access = blocked
        return [_index(analyzer.simplify(rest + position * coefficient), access)]

    if gather:  # channel c's L positions in a row: row c, lane j is position j's channel c
        rows = [tirx.BufferLoad(load.source, planar_at(first, c)) for c in range(lanes)]
    else:  # position j's channels in a row
        rows = [tirx.BufferLoad(load.source, blocked_at(first + j)) for j in range(lanes)]
    lets, columns = _transpose(rows, str(var.name))
    stores = []
    for k, column in enumerate(columns):  # gather: position k's channels; else channel k's
        at = blocked_at(first + k) if gather else planar_at(first, k)
        stores.append(tirx.BufferStore(store.buffer, column, at))
    whole = count // lanes
    body = tirx.SeqStmt([*lets, *stores])
    steps = [tirx.For(q, 0, whole, tirx.ForKind.SERIAL, body)]
    if count % lanes:
        start = loop.min + whole * lanes
        steps.append(tirx.For(var, start, count - whole * lanes, loop.kind, loop.body))
    return steps[0] if len(steps) == 1 else tirx.SeqStmt(steps)


def _transpose(rows: list, name: str) -> tuple[list[tirx.Stmt], list]:
    """``(bindings, columns)``: the ``L`` vectors of ``L`` lanes ``rows`` transposed, column
    ``k`` lane ``i`` being row ``i`` lane ``k``. Each stage swaps the off-diagonal blocks of
    ``b x b`` in every ``2b x 2b`` block (``b`` from ``L / 2`` down to 1): one two-vector
    shuffle a row a stage, each stage's rows bound to variables."""
    lanes = len(rows)
    dtype = rows[0].ty
    lets = []
    current = []
    for i, row in enumerate(rows):
        v = tirx.Var(f"{name}_t{i}", dtype)
        lets.append(tirx.LetStmt(v, row))
        current.append(v)
    b, stage = lanes // 2, 0
    while b >= 1:
        upper = [j if (j // b) % 2 == 0 else lanes + j - b for j in range(lanes)]
        lower = [j + b if (j // b) % 2 == 0 else lanes + j for j in range(lanes)]
        nxt = list(current)
        for i in range(lanes):
            if (i // b) % 2:
                continue
            pair = [current[i], current[i + b]]
            for row, picks in ((i, upper), (i + b, lower)):
                v = tirx.Var(f"{name}_s{stage}_{row}", dtype)
                lets.append(tirx.LetStmt(v, tirx.Shuffle(pair, [_int(p) for p in picks])))
                nxt[row] = v
        current, b, stage = nxt, b // 2, stage + 1
    return lets, current


def _int(value: int) -> tirx.IntImm:
    return tirx.IntImm("int32", value)
