"""Row reductions padded to whole vectors: each reduction block over a row of ``length``
elements runs over ``padded`` (a multiple of the vector), the extra elements combining the
reducer's identity (its ``init`` value), so the row splits into vectors with no remainder.

``rfactor`` on a loop a vector does not divide leaves a predicate on the partial-result block
that 0.27's ``compute_at`` drops (the block then reads past the row) and that ``vectorize``
and ``decompose_reduction`` refuse (the binding is no longer affine); a domain the vector
divides has no predicate. The guard ``likely(k < length)`` is simplified away in the whole
vectors once the row loop is partitioned, and runs scalar in the last one.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from tvm_hetero.ir.sblocks import loop_with, realize_with

_COMBINERS = (tirx.Add, tirx.Mul, tirx.Max, tirx.Min)


class _NotRows(ValueError):
    """A reduction this rewrite does not handle (the kernel keeps its schedule)."""


def pad_row_reductions(func: tirx.PrimFunc, length: int, padded: int) -> tirx.PrimFunc | None:
    """``func`` with every reduction block over one axis of ``length`` elements (bound to its
    own loop) running over ``padded``; None where a reduction is not such a block (more than
    one reduction axis, another length, a body that is not ``out = combine(out, value)``)."""
    try:
        return func.with_body(_pad(func.body, length, padded))
    except _NotRows:
        return None


def _pad(stmt: tirx.Stmt, length: int, padded: int) -> tirx.Stmt:
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_pad(s, length, padded) for s in stmt.seq])
    if isinstance(stmt, tirx.For):
        body, extent = stmt.body, stmt.extent
        if isinstance(body, s_tir.SBlockRealize) and _reduces(body.block):
            body, bound = _padded_block(body, length, padded)
            if not bound.same_as(stmt.loop_var):
                raise _NotRows("the reduction axis is not this loop")
            extent = tirx.const(padded, str(stmt.loop_var.ty))
        else:
            body = _pad(body, length, padded)
        return loop_with(stmt, extent=extent, body=body)
    if isinstance(stmt, s_tir.SBlockRealize):
        block = stmt.block
        if _reduces(block):
            raise _NotRows("a reduction block not under its own loop")
        return realize_with(stmt, body=_pad(block.body, length, padded))
    return stmt


def _reduces(block: s_tir.SBlock) -> bool:
    return any(v.iter_type == tirx.IterVar.CommReduce for v in block.iter_vars)


def _padded_block(
    realize: s_tir.SBlockRealize, length: int, padded: int
) -> tuple[s_tir.SBlockRealize, tirx.PrimExpr]:
    """The block of ``realize`` over ``padded`` elements, and what its reduction axis is
    bound to."""
    block = realize.block
    axes = [k for k, v in enumerate(block.iter_vars) if v.iter_type == tirx.IterVar.CommReduce]
    store, init = block.body, block.init
    if len(axes) != 1 or not isinstance(store, tirx.BufferStore):
        raise _NotRows("not one reduction axis into one store")
    if not isinstance(init, tirx.BufferStore):
        raise _NotRows("no initial value")
    (k,) = axes
    axis = block.iter_vars[k]
    if not isinstance(axis.dom.extent, tirx.IntImm) or int(axis.dom.extent) != length:
        raise _NotRows("another length")
    value = _guarded(store, tirx.likely(axis.var < length), init.value)
    dtype = str(axis.var.ty)
    iter_vars = list(block.iter_vars)
    iter_vars[k] = tirx.IterVar(
        tvm.ir.Range.from_min_extent(tirx.const(0, dtype), tirx.const(padded, dtype)),
        axis.var, axis.iter_type,
    )  # fmt: skip
    body = tirx.BufferStore(store.buffer, value, store.indices)
    return realize_with(realize, iter_vars=iter_vars, body=body), realize.iter_values[k]


def _guarded(store: tirx.BufferStore, inside: tirx.PrimExpr, identity: tirx.PrimExpr):
    """``combine(out, value)`` as ``combine(out, value if inside else identity)``."""
    combined = store.value
    if not isinstance(combined, _COMBINERS):
        raise _NotRows("not a combination of the output with a value")

    def is_out(e: tirx.PrimExpr) -> bool:
        return isinstance(e, tvm.ir.expr.TensorLoad) and e.source.same_as(store.buffer) and all(
            tvm_ffi.structural_equal(a, b) for a, b in zip(e.indices, store.indices, strict=True)
        )  # fmt: skip

    a, b = combined.a, combined.b
    if is_out(a):
        return type(combined)(a, tirx.if_then_else(inside, b, identity))
    if is_out(b):
        return type(combined)(tirx.if_then_else(inside, a, identity), b)
    raise _NotRows("not a combination of the output with a value")
