"""GuardedReadsAsVectors: a CPU kernel's loop whose stored value reads under a condition (a copy
that pads its input) runs a vector at a time, whole vectors where the condition holds on
every lane."""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import IRModule, Range
from tvm.ir.expr import Call
from tvm.sym.analyzer import Analyzer
from tvm.tirx.analysis import undefined_vars

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.lowered_loops import bound_values, linear_in, statements, vectorized
from tvm_hetero.ir.sblocks import substituted, with_prim_funcs
from tvm_hetero.passes.stack_loop_buffers import rewritten_cpu_loops
from tvm_hetero.schedules.cpu.common import vector_lanes

VECTOR_READS = True
"""Whether the pass rewrites anything (off: the lowered TIR as TVM leaves it)."""

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
    shuffle); any other chunk, and the lanes past the last whole chunk, run as before.

    The copy that pads a convolution's input guards each read with the padding's bounds;
    TVM's vectorizer leaves such a loop serial, and LLVM's vectorized it with a gather for
    every vector where the convolution's stride lays the input out by column phase (a
    strided 3x3 of 32 -> 16 channels over 112 x 112 gathered a sixteenth of its input at a
    time, as long as its multiply-adds took).

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
    if count < lanes or not isinstance(store, tirx.BufferStore) or len(store.indices) != 1:
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
    chunked = tirx.IfThenElse(
        ends,
        tirx.BufferStore(store.buffer, vector[0], [at]),
        tirx.For(lane, 0, lanes, tirx.ForKind.SERIAL, scalar),
    )
    steps = [tirx.For(chunk, 0, whole, tirx.ForKind.SERIAL, chunked)]
    if count % lanes:
        start = loop.min + whole * lanes
        steps.append(tirx.For(var, start, count - whole * lanes, loop.kind, loop.body))
    return steps[0] if len(steps) == 1 else tirx.SeqStmt(steps)


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
