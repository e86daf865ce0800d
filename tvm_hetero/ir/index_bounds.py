"""Which data inputs index a table, and how large the table is: checked before a run.

A ``take`` reads row ``i`` of its table for every id ``i``, a gather or scatter reads or writes
at ``i`` along an axis; an id past the table read other memory (TVM compiles them unchecked).
Every indexing operator is compiled to wrap ids (``WrapIndices``), so nothing reads outside a
table; this analysis finds the inputs whose ids reach one unchanged but for ONNX's
normalisation of negative ids (``where(ids < 0, ids + n, ids)``) and casts or reshapes, so the
runtime refuses an id outside ``[-n, n)`` with an error naming the input, the value and the
range, as ONNX Runtime does.

The operators: ``take`` (ONNX ``Gather``, embeddings), ``gather_elements`` and
``scatter_elements`` (the extent of their ``axis``), ``gather_nd`` and ``scatter_nd`` (the
extents an index tuple's components run over, after ``batch_dims``: one bound when they are
equal; when they differ the ids only wrap, since one range per input would refuse valid ids).
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
ALONG_AXIS = frozenset({"relax.take", "relax.gather_elements", "relax.scatter_elements"})
"""Indexing operators whose ids run along ``data``'s ``axis``."""
INTO_LEADING = frozenset({"relax.gather_nd", "relax.scatter_nd"})
"""Indexing operators whose ids are tuples into ``data``'s dimensions after ``batch_dims``."""
INDEXING = ALONG_AXIS | INTO_LEADING


def index_bounds(func: relax.Function) -> dict[str, int]:
    """``{input name: rows}`` for each parameter of ``func`` whose values index a table of that
    many rows (the smallest such table when it indexes several)."""
    params = {p: str(p.name) for p in func.params}
    values: dict[relax.Var, relax.Expr] = {b.var: b.value for _, _, b in iter_bindings(func)}
    bounds: dict[str, int] = {}
    for value in values.values():
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


def index_extents(call: relax.Expr) -> list[int | None] | None:
    """The extents an indexing ``call``'s ids (its second argument) run over: one for an axis
    (``take``, ``gather_elements``, ``scatter_elements``), one per index-tuple component
    (``gather_nd``, ``scatter_nd``); ``None`` for a symbolic extent. ``None`` when ``call``
    is no indexing operator or the shapes are unknown."""
    name = _op_name(call)
    if name not in INDEXING:
        return None
    dims = _dims(call.args[0])
    if dims is None:
        return None
    if name in ALONG_AXIS:
        axis = call.attrs.axis
        return None if axis is None else [dims[int(axis) % len(dims)]]
    tuple_dims = _dims(call.args[1])
    if tuple_dims is None or tuple_dims[-1] is None:
        return None
    first = int(call.attrs.batch_dims) if name == "relax.gather_nd" else 0
    return dims[first : first + tuple_dims[-1]]


def _rows(call: relax.Expr) -> int | None:
    """The rows of the table ``call`` indexes: ``None`` unless all its extents are one size."""
    extents = index_extents(call)
    if not extents or len(set(extents)) != 1 or extents[0] is None:
        return None
    return extents[0]


def _dims(expr: relax.Expr) -> list[int | None] | None:
    """``expr``'s dimensions, ``None`` for a symbolic one; ``None`` for an unknown shape."""
    infos = tensor_infos(expr.ty)
    if len(infos) != 1 or infos[0].shape is None:
        return None
    return [d if isinstance(d, int) else None for d in infos[0].shape]


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
