"""Which data inputs index a table, and how large the table is: checked before a run.

A ``take`` reads row ``i`` of its table for every id ``i``; an id past the table read other
memory (TVM's default ``fast`` mode has no check). Every take is compiled to wrap ids
(``WrapIndices``), so nothing reads outside a table; this analysis finds the inputs whose
ids reach a take unchanged but for ONNX's normalisation of negative ids (``where(ids < 0,
ids + n, ids)``) and casts or reshapes, so the runtime refuses an id outside ``[-n, n)`` with an
error naming the input, the value and the range, as ONNX Runtime does.
"""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_hetero.ir.bindings import iter_bindings
from tvm_hetero.ir.types import tensor_infos

PASSING = frozenset(
    {
        "relax.astype", "relax.reshape", "relax.squeeze", "relax.expand_dims",
        "relax.permute_dims", "relax.flatten", "relax.broadcast_to", "relax.add",
        "relax.where",
    }
)  # fmt: skip
"""Operators through which ids keep their values (``add``: ONNX's ``ids + n`` for a negative
id; ``where``: its choice between that and the id)."""


def index_bounds(func: relax.Function) -> dict[str, int]:
    """``{input name: rows}`` for each parameter of ``func`` whose values index a table of that
    many rows (the smallest such table when it indexes several)."""
    params = {p: str(p.name) for p in func.params}
    values: dict[relax.Var, relax.Expr] = {b.var: b.value for _, _, b in iter_bindings(func)}
    bounds: dict[str, int] = {}
    for value in values.values():
        if _op_name(value) != "relax.take":
            continue
        rows = _rows(value)
        if rows is None:
            continue
        for name in _sources(value.args[1], params, values):
            bounds[name] = min(rows, bounds.get(name, rows))
    return bounds


def _op_name(expr: relax.Expr | None) -> str | None:
    """The operator a call binds (``relax.take``), or ``None`` for anything else."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return str(expr.op.name)
    return None


def _rows(take: relax.Call) -> int | None:
    infos = tensor_infos(take.args[0].ty)
    axis = take.attrs.axis
    if axis is None or len(infos) != 1 or infos[0].shape is None:
        return None
    extent = infos[0].shape[int(axis)]
    return extent if isinstance(extent, int) else None


def _sources(
    expr: relax.Expr, params: dict[relax.Var, str], values: dict[relax.Var, relax.Expr]
) -> set[str]:
    """The parameters whose values reach ``expr`` through :data:`PASSING` operators."""
    found: set[str] = set()
    stack, seen = [expr], set()
    while stack:
        e = stack.pop()
        if not isinstance(e, relax.Var) or e in seen:
            continue
        seen.add(e)
        if e in params:
            found.add(params[e])
            continue
        value = values.get(e)
        if isinstance(value, relax.Var):
            stack.append(value)
        elif _op_name(value) in PASSING:
            stack.extend(value.args[1:] if _op_name(value) == "relax.where" else value.args)
    return found
