"""WrapIndices: no indexing operator reads or writes outside its table, whatever ids reach it."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero.ir.index_bounds import index_extents
from tvm_hetero.ir.mutate import mutate_functions

TAKE = "relax.take"


@tvm.transform.module_pass(opt_level=0, name="WrapIndices")
class WrapIndices:
    """Make every id of an indexing operator wrap into its table.

    TVM compiles them unchecked: ``take`` in ``fast`` mode (what the frontends emit) and the
    gathers and scatters always read or write row ``i`` for any ``i``, so an id past the table
    read other memory, returning garbage or killing the process (a worker with it). Here
    ``take`` becomes ``wrap`` mode, and the ids of ``gather_elements``, ``scatter_elements``,
    ``gather_nd`` and ``scatter_nd`` are taken modulo their dimension (``floor_mod``, one per
    component of an index tuple). Ids in ``[0, n)`` read what they did; a negative id in
    ``[-n, 0)`` counts from the end (ONNX's and Python's meaning); none reaches outside the
    table. The runtime refuses input ids outside ``[-n, n)`` before a run
    (:func:`~tvm_hetero.ir.index_bounds.index_bounds`); this pass covers ids the model computes.
    An operator whose dimension is symbolic is left as it is; ``take`` in ``clip`` or ``nan``
    mode too.

    Examples
    --------
    ``R.take(table, ids, axis=0)`` becomes ``R.take(table, ids, axis=0, mode="wrap")``;
    ``R.gather_elements(x, ids, axis=1)`` becomes
    ``R.gather_elements(x, R.floor_mod(ids, R.const(n, ids.dtype)), axis=1)``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module whose indexing wraps (equal to ``mod`` when nothing changes)."""
        return mutate_functions(mod, _Wrap(mod))


def _wrapped(ids: relax.Expr, sizes: list[int | None]) -> relax.Expr | None:
    """``ids`` modulo ``sizes`` (a scalar, or one per last-axis component), or ``None``."""
    if not sizes or any(n is None for n in sizes):
        return None
    dtype = str(ids.ty.dtype)
    bound = relax.const(sizes[0] if len(sizes) == 1 else sizes, dtype)
    return relax.op.floor_mod(ids, bound)


@mutator
class _Wrap(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
            return call
        name, args = call.op.name, list(call.args)
        if name == TAKE and str(call.attrs.mode) == "fast":
            axis = call.attrs.axis
            return relax.op.take(args[0], args[1], None if axis is None else int(axis),
                                 mode="wrap")  # fmt: skip
        extents = None if name == TAKE else index_extents(call)
        ids = None if extents is None else _wrapped(args[1], extents)
        if ids is None:
            return call
        args[1] = ids
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)
