"""Reading a lowered TIR loop's body (its statements, the values its bindings stand for, an
index linear in its variable) and vectorizing expressions of its variable as TVM does: what
the TIR passes that rewrite a CPU kernel's loops share."""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import IRModule
from tvm.sym import detect_linear_equation

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.sblocks import substituted


def statements(stmt: tirx.Stmt) -> list[tirx.Stmt]:
    """The statements of ``stmt`` in order (``stmt`` alone where it is no sequence)."""
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def bound_values(lets: list[tirx.Stmt]) -> dict | None:
    """What each variable the bindings ``lets`` define stands for, in terms of the variables
    bound outside them (a binding's value with the earlier ones in place), or ``None`` where
    one of ``lets`` is no binding."""
    if not all(isinstance(let, tirx.LetStmt) for let in lets):
        return None
    values: dict = {}
    for let in lets:
        values[let.var] = substituted(let.value, values)
    return values


def linear_in(expr: tirx.PrimExpr, var: tirx.Var) -> tuple[int, tirx.PrimExpr] | None:
    """``(coefficient, rest)`` of ``expr`` as ``coefficient * var + rest`` with a constant
    coefficient, or ``None`` where it is not so."""
    found = detect_linear_equation(expr, [var])
    if len(found) != 2 or not isinstance(found[0], tirx.IntImm):
        return None
    return int(found[0]), found[1]


def vectorized(var: tirx.Var, start, lanes: int, exprs: list) -> list | None:
    """``exprs`` over ``var`` (``start`` to ``start + lanes - 1``) as vectors of ``lanes``,
    as TVM's ``VectorizeLoop`` computes them; ``None`` where it would not."""
    lane = tirx.Var("lane", var.ty)
    slots = [
        tirx.decl_buffer((lanes,), str(e.ty.dtype), name=f"slot{k}") for k, e in enumerate(exprs)
    ]
    stores = [
        tirx.BufferStore(slot, substituted(e, {var: lane + start}), [lane])
        for slot, e in zip(slots, exprs, strict=True)
    ]
    body = stores[0] if len(stores) == 1 else tirx.SeqStmt(stores)
    loop = tirx.For(lane, 0, lanes, tirx.ForKind.VECTORIZED, body)
    done = tvm.tirx.transform.VectorizeLoop()(IRModule({"f": PrimFunc([], loop)}))["f"].body
    found = statements(done)
    if len(found) != len(slots) or not all(isinstance(s, tirx.BufferStore) for s in found):
        return None
    out = []
    for slot, s in zip(slots, found, strict=True):
        if not s.buffer.same_as(slot) or lanes_of(s.value) != lanes:
            return None
        out.append(s.value)
    return out


def lanes_of(expr: tirx.PrimExpr) -> int:
    """The lanes of ``expr``'s type (1 for a scalar)."""
    return tvm.DataType(str(expr.ty.dtype)).lanes
