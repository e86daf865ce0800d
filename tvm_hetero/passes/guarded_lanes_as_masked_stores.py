"""GuardedLanesAsMaskedStores: a CPU kernel's loop over a vector's lanes whose store a condition
guards (a register tile written back into a cropped output) as one vector computation and a
masked store."""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import IRModule, Range
from tvm.ir.expr import Call, TensorLoad
from tvm.sym.analyzer import Analyzer
from tvm.tirx.analysis import undefined_vars
from tvm.tirx.expr import BinaryOpExpr, CmpExpr

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.lowered_loops import bound_values, lanes_of, linear_in, statements, vectorized
from tvm_hetero.ir.sblocks import substituted, with_prim_funcs
from tvm_hetero.passes.stack_loop_buffers import rewritten_cpu_loops

MASKED_STORES = True
"""Whether the pass rewrites anything (off: the lowered TIR as TVM leaves it)."""

LANES = (4, 8, 16, 32, 64)
"""The loop extents taken as one vector: a float32 vector of SSE, AVX2 or AVX-512, or two or
four of AVX-512's (a tile written back two vectors at a time: LLVM splits the vector)."""

PURE_CALLS = frozenset({
    "tirx.floor", "prim.ceil", "tirx.round", "tirx.nearbyint", "tirx.trunc", "tirx.fabs",
    "tirx.sqrt", "tirx.exp", "tirx.exp2", "tirx.log", "prim.log2", "tirx.tanh", "tirx.sigmoid",
    "tirx.erf", "tirx.pow", "tirx.fma", "tirx.copysign", "tirx.isnan", "tirx.reinterpret",
    "prim.if_then_else",
})  # fmt: skip
"""Calls a guarded value may hold: arithmetic without side effects, safe on any lane."""


@tvm.transform.module_pass(opt_level=0, name="GuardedLanesAsMaskedStores")
class GuardedLanesAsMaskedStores:
    """Run each CPU kernel's loop ``for l in range(L): if cond(l): out[b + l] = f(l)`` as one
    vector ``f`` of ``L`` lanes and a masked store of the lanes where ``cond`` holds.

    A register tile written back into an output that a crop made narrower than the tile (a
    convolution ``PadConvolutionOutputs`` computes over whole vectors, its epilogue folded
    into the write-back) guards each lane of its last vector with the crop's condition; TVM's
    vectorizer leaves a loop with such a condition serial, and LLVM's own vectorized it at
    half the width, a masked gather for every value its lanes share (a channel's bias) and
    the tile spilled to memory. Over a 56 x 56 map a depthwise convolution with SiLU took
    four times as long as with ReLU.

    ``L`` is in :data:`LANES`, the store's index ``b + l`` (one scalar element a lane), and
    every read in ``f`` and ``cond`` safe on every lane: its index the same on every lane,
    or a read of a ``local`` buffer whose index stays within the buffer over the loop; calls
    only those of :data:`PURE_CALLS`. The lanes stored get the same values; numbers are
    unchanged.

    Notes
    -----
    Runs on the lowered TIR of the build's host functions (the first of their steps,
    :func:`~tvm_hetero.build.multi_device.tir_pipeline`); only under ``device_type`` CPU.
    ``f`` and ``cond`` are vectorized by TVM's ``VectorizeLoop``; the store is TVM's
    ``tirx.masked_store``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with its CPU kernels' guarded lane loops as masked stores (``mod``
        if it has none)."""
        return with_prim_funcs(mod, masked) if MASKED_STORES else mod


def masked(func: PrimFunc) -> PrimFunc:
    """``func`` with its guarded lane loops under ``device_type`` CPU as masked stores."""
    return rewritten_cpu_loops(func, as_masked_store)


def as_masked_store(loop: tirx.For, outer: tuple = ()) -> tirx.Stmt | None:
    """``loop`` as a vector computation and a masked store
    (:class:`GuardedLanesAsMaskedStores`), or ``None`` where it is not a guarded lane loop;
    ``outer``: the loops around it, whose ranges bound the indices it reads."""
    if loop.kind != tirx.ForKind.SERIAL:
        return None
    if not isinstance(loop.min, tirx.IntImm) or not isinstance(loop.extent, tirx.IntImm):
        return None
    *outside, guard = statements(loop.body)
    lanes = int(loop.extent)
    if lanes not in LANES or not isinstance(guard, tirx.IfThenElse) or guard.else_case is not None:
        return None
    *inside, store = statements(guard.then_case)
    if not isinstance(store, tirx.BufferStore) or len(store.indices) != 1:
        return None
    if tvm.DataType(str(store.buffer.dtype)).lanes != 1 or lanes_of(store.value) != 1:
        return None
    values = bound_values([*outside, *inside])  # bound around or under the guard: in place
    if values is None:
        return None
    var, condition = loop.loop_var, substituted(guard.condition, values)
    value, index = substituted(store.value, values), substituted(store.indices[0], values)
    found = linear_in(index, var)
    if found is None or found[0] != 1:
        return None
    analyzer = Analyzer()
    for around in (*outer, loop):
        analyzer.bind(around.loop_var, Range.from_min_extent(around.min, around.extent))
    if not all(_safe(e, var, analyzer) for e in (value, condition)):
        return None
    vectors = vectorized(var, loop.min, lanes, [value, condition])
    if vectors is None:
        return None
    first = analyzer.simplify(found[1] + loop.min)
    call = tirx.op.masked_store(store.buffer, vectors[0], tirx.Ramp(first, 1, lanes), vectors[1])
    return tirx.Evaluate(call)


def _safe(expr, var: tirx.Var, analyzer: Analyzer) -> bool:
    """Whether ``expr`` may be computed on every lane of the loop over ``var`` (bound in
    ``analyzer``): scalar arithmetic whose reads are each the same on every lane or of a
    ``local`` buffer within its bounds, and no call outside :data:`PURE_CALLS`."""
    if isinstance(expr, tirx.Var | tirx.IntImm | tirx.FloatImm):
        return True
    if isinstance(expr, TensorLoad):
        return _safe_read(expr, var, analyzer)
    if isinstance(expr, BinaryOpExpr | CmpExpr | tirx.And | tirx.Or):
        return _safe(expr.a, var, analyzer) and _safe(expr.b, var, analyzer)
    if isinstance(expr, tirx.Cast | tirx.Not):
        return _safe(expr.value if isinstance(expr, tirx.Cast) else expr.a, var, analyzer)
    if isinstance(expr, tirx.Let):  # its value in place: a read through it may use ``var``
        body = substituted(expr.body, {expr.var: expr.value})
        return _safe(expr.value, var, analyzer) and _safe(body, var, analyzer)
    if isinstance(expr, tirx.Select):
        parts = (expr.condition, expr.true_value, expr.false_value)
        return all(_safe(p, var, analyzer) for p in parts)
    if isinstance(expr, Call):
        name = getattr(expr.op, "name", "")
        return name in PURE_CALLS and all(_safe(a, var, analyzer) for a in expr.args)
    return False  # vectors already (a Ramp, a Broadcast, a Shuffle): left alone


def _safe_read(load: TensorLoad, var: tirx.Var, analyzer: Analyzer) -> bool:
    if len(load.indices) != 1 or lanes_of(load) != 1:
        return False
    index = load.indices[0]
    if not any(v.same_as(var) for v in undefined_vars(index)):
        return True
    source = load.source
    if source.scope() != "local" or len(source.shape) != 1:
        return False
    size = source.shape[0]
    if not isinstance(size, tirx.IntImm):
        return False
    bound = analyzer.const_int_bound(index)
    return bound.min_value >= 0 and bound.max_value < int(size)
