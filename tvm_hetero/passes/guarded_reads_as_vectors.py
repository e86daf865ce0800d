"""GuardedReadsAsVectors: a CPU kernel's loop whose stored value reads under a condition (a copy
that pads its input) runs a vector at a time, whole vectors where the condition holds on
every lane."""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import IRModule, Range
from tvm.ir.expr import Call, TensorLoad
from tvm.sym.analyzer import Analyzer
from tvm.tirx.analysis import undefined_vars

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.lowered_loops import bound_values, linear_in, statements, vectorized
from tvm_hetero.ir.sblocks import substituted, with_prim_funcs
from tvm_hetero.passes.stack_loop_buffers import rewritten_cpu_loops
from tvm_hetero.schedules.cpu.common import vector_lanes

VECTOR_READS = True
"""Whether the pass rewrites anything (off: the lowered TIR as TVM leaves it)."""

MASKED_EDGES = True
"""Whether a chunk that the condition holds on only in part (at a padded end of a row) runs as
one vector, its read masked to the lanes that meet the condition (off: lane by lane)."""

CHUNK_VECTORS = 0.5
"""Vector registers' worth of lanes a chunk takes: half a vector (8 floats with AVX-512) leaves
fewer lanes of each row to the scalar chunks at its padded ends than a whole one."""

_ORDERED = (tirx.LT, tirx.LE, tirx.GT, tirx.GE)


@tvm.transform.module_pass(opt_level=0, name="GuardedReadsAsVectors")
class GuardedReadsAsVectors:
    """Run each CPU kernel's loop ``for l in range(E): out[b + l] = if_then_else(cond(l),
    x(l), y)`` in chunks of ``L`` lanes: a chunk whose first and last lanes meet ``cond``
    stores ``x`` as one vector of ``L`` lanes (its reads whole vectors, or strided ones that
    :class:`~tvm_hetero.passes.StridedLoadsAsShuffles` then reads as whole vectors and a
    shuffle); any other chunk (at a padded end), and the lanes past the last whole chunk
    (or a loop shorter than one), where ``x`` is one contiguous read and ``y`` the same on
    every lane, is one vector too: ``x`` read by a load masked to the lanes that meet
    ``cond``, ``y`` on the others, the lanes past the loop's end masked off the store
    (:data:`MASKED_EDGES`); other such chunks run as before.

    The copy that pads a convolution's input guards each read with the padding's bounds;
    TVM's vectorizer leaves such a loop serial, and LLVM's vectorized it with a gather for
    every vector where the convolution's stride lays the input out by column phase (a
    strided 3x3 of 32 -> 16 channels over 112 x 112 gathered a sixteenth of its input at a
    time, as long as its multiply-adds took). Rows one or two vectors wide padded at their
    ends only (a tile cut from the middle of a map's rows, a 1x7 convolution) it unrolled
    and, built for Zen 4, vectorized the loops around them instead, with a gather and a
    scatter across the channels: a 3x3 convolution of 512 channels over four rows of 7
    took 1.9 ms where one padded above too took 1.3.

    ``cond`` is a conjunction of comparisons (``<``, ``<=``, ``>``, ``>=``) each of whose
    sides differ by a linear function of ``l``, so the lanes that meet it are one run and a
    chunk whose ends meet it meets it on every lane; the stored index is ``b + l``. ``L`` is
    :data:`CHUNK_VECTORS` of the function target's vector lanes. Where every lane meets the
    condition, the scalar loop stored ``x`` on every lane and read what ``x`` reads; the
    numbers are unchanged.

    Notes
    -----
    Runs on the lowered TIR of the build's host functions
    (:func:`~tvm_hetero.build.multi_device.tir_pipeline`, after
    :class:`~tvm_hetero.passes.GuardedLanesAsMaskedStores`, before
    :class:`~tvm_hetero.passes.StridedLoadsAsShuffles`); only under ``device_type`` CPU, in
    functions with a ``target``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with its CPU kernels' guarded reads in vectors (``mod`` if it has
        none)."""
        return with_prim_funcs(mod, in_vectors) if VECTOR_READS else mod


def in_vectors(func: PrimFunc) -> PrimFunc:
    """``func`` with its guarded reads under ``device_type`` CPU in chunks of vectors."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "llvm":
        return func
    lanes = max(2, int(vector_lanes(target, 32) * CHUNK_VECTORS))
    return rewritten_cpu_loops(func, lambda loop, _outer: as_vector_chunks(loop, lanes))


def as_vector_chunks(loop: tirx.For, lanes: int) -> tirx.Stmt | None:
    """``loop`` in chunks of ``lanes`` (:class:`GuardedReadsAsVectors`), or ``None`` where it
    is not a loop storing a guarded read."""
    if loop.kind != tirx.ForKind.SERIAL:
        return None
    if not isinstance(loop.min, tirx.IntImm) or not isinstance(loop.extent, tirx.IntImm):
        return None
    count, var = int(loop.extent), loop.loop_var
    *lets, store = statements(loop.body)
    shortest = 2 if MASKED_EDGES else lanes  # shorter: one masked chunk
    if count < shortest or not isinstance(store, tirx.BufferStore) or len(store.indices) != 1:
        return None
    if tvm.DataType(str(store.buffer.dtype)).lanes != 1:
        return None
    if _guarded(store.value) is None:  # before the bindings are folded in: most loops stop here
        return None
    values = bound_values(lets)
    if values is None:
        return None
    value, index = substituted(store.value, values), substituted(store.indices[0], values)
    guarded = _guarded(value)  # the simplifier may have settled the guard with them
    if guarded is None:
        return None
    condition, read = guarded
    found = linear_in(index, var)
    if found is None or found[0] != 1:
        return None
    if not all(_monotone(atom, var) for atom in _conjuncts(condition)):
        return None
    chunk = tirx.Var("chunk", var.ty)
    first = loop.min + chunk * lanes
    vector = vectorized(var, first, lanes, [read])
    if vector is None:
        return None
    whole = count // lanes
    analyzer = Analyzer()
    analyzer.bind(chunk, Range.from_min_extent(0, whole))
    ends = analyzer.simplify(
        tirx.And(
            substituted(condition, {var: first}),
            substituted(condition, {var: first + (lanes - 1)}),
        )
    )
    at = tirx.Ramp(analyzer.simplify(found[1] + first), 1, lanes)
    lane = tirx.Var("lane", var.ty)
    one = {var: first + lane}
    scalar = tirx.BufferStore(store.buffer, substituted(value, one), [substituted(index, one)])
    edge = MASKED_EDGES and _masked_chunk(store.buffer, value, var, first, lanes, found[1], None)
    chunked = tirx.IfThenElse(
        ends,
        tirx.BufferStore(store.buffer, vector[0], [at]),
        edge or tirx.For(lane, 0, lanes, tirx.ForKind.SERIAL, scalar),
    )
    steps = [tirx.For(chunk, 0, whole, tirx.ForKind.SERIAL, chunked)] if whole else []
    left = count - whole * lanes
    if left:
        start = loop.min + whole * lanes
        last = MASKED_EDGES and _masked_chunk(store.buffer, value, var, start, lanes, found[1],
                                              left)  # fmt: skip
        if not (whole or last):
            return None
        steps.append(last or tirx.For(var, start, left, loop.kind, loop.body))
    return steps[0] if len(steps) == 1 else tirx.SeqStmt(steps)


def _masked_chunk(
    buffer: tirx.Buffer, value, var: tirx.Var, first, lanes: int, base, valid: int | None
) -> tirx.Stmt | None:
    """The chunk of ``lanes`` lanes of ``var`` from ``first`` of the store ``buffer[base +
    var] = if_then_else(cond, x[b + var], y)`` as one vector: ``x`` read by a load masked to
    the lanes that meet ``cond``, ``y`` on the others, the first ``valid`` lanes stored
    (every lane where ``None``); ``None`` where ``x`` is not such a read or ``y`` reads with
    ``var``."""
    condition, read, other = value.args
    if not isinstance(read, TensorLoad) or len(read.indices) != 1:
        return None
    found = linear_in(read.indices[0], var)
    if found is None or found[0] != 1 or any(v.same_as(var) for v in undefined_vars(other)):
        return None
    mask = vectorized(var, first, lanes, [condition])
    if mask is None:
        return None
    analyzer = Analyzer()
    span = tirx.Ramp(analyzer.simplify(first), 1, lanes)
    stored = None
    if valid is not None:
        stored = span < tirx.Broadcast(analyzer.simplify(first + valid), lanes)
        mask = [tirx.And(mask[0], stored)]
    dtype = str(tvm.DataType(str(read.ty.dtype)).with_lanes(lanes))
    at = tirx.Ramp(analyzer.simplify(found[1] + first), 1, lanes)
    loaded = tirx.op.masked_load(dtype, read.source, at, mask[0])
    vector = tirx.Select(mask[0], loaded, tirx.Broadcast(other, lanes))
    to = tirx.Ramp(analyzer.simplify(base + first), 1, lanes)
    if stored is None:
        return tirx.BufferStore(buffer, vector, [to])
    return tirx.Evaluate(tirx.op.masked_store(buffer, vector, to, stored))


def _guarded(value) -> tuple | None:
    """``(cond, x)`` of a stored value ``if_then_else(cond, x, y)``, else ``None``."""
    if not isinstance(value, Call) or getattr(value.op, "name", "") != "prim.if_then_else":
        return None
    return value.args[0], value.args[1]


def _conjuncts(cond) -> list:
    if isinstance(cond, tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _monotone(atom, var: tirx.Var) -> bool:
    """Whether the lanes that meet ``atom`` are one run of ``var``: ``atom`` does not use
    ``var``, or compares two sides whose difference is linear in it."""
    if not any(v.same_as(var) for v in undefined_vars(atom)):
        return True
    if not isinstance(atom, _ORDERED):
        return False
    return linear_in(atom.a - atom.b, var) is not None
