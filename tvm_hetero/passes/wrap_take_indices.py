"""WrapTakeIndices: no ``take`` reads outside its table, whatever ids reach it."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero.ir.mutate import mutate_functions

TAKE = "relax.take"


@tvm.transform.module_pass(opt_level=0, name="WrapTakeIndices")
class WrapTakeIndices:
    """Compile every ``take`` in ``wrap`` mode instead of ``fast``.

    ``fast`` (what TVM's frontends emit) reads row ``i`` for any ``i``: an id past the table
    read other memory, returning garbage or killing the process (a worker with it). ``wrap``
    takes ``i mod n``: ids in ``[0, n)`` read what they did, a negative id in ``[-n, 0)``
    counts from the end (ONNX's and Python's meaning), and no id reads outside the table. The
    runtime refuses an input id outside ``[-n, n)`` before the run
    (:func:`~tvm_hetero.ir.index_bounds.index_bounds`); this pass covers ids the model computes
    itself. ``clip`` and ``nan`` modes are left as they are.

    Examples
    --------
    ``R.take(table, ids, axis=0)`` becomes ``R.take(table, ids, axis=0, mode="wrap")``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module whose takes wrap (equal to ``mod`` when none is ``fast``)."""
        return mutate_functions(mod, _Wrap(mod))


@mutator
class _Wrap(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if (
            isinstance(call, relax.Call)
            and isinstance(call.op, tvm.ir.Op)
            and call.op.name == TAKE
            and str(call.attrs.mode) == "fast"
        ):
            axis = call.attrs.axis
            return relax.op.take(call.args[0], call.args[1], None if axis is None else int(axis),
                                 mode="wrap")  # fmt: skip
        return call
