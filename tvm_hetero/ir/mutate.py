"""Running one Relax expression mutator over every Relax function of a module."""

from __future__ import annotations

from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator


def bound_value(rewriter: PyExprMutator, expr: relax.Expr) -> relax.Expr:
    """What ``expr`` is bound to in the function ``rewriter`` is rewriting (a weight given as
    ``w = const`` reads as the constant), or ``expr`` itself when it is no variable bound there
    (a parameter, a constant)."""
    value = rewriter.lookup_binding(expr) if isinstance(expr, relax.Var) else None
    return expr if value is None else value


def mutate_functions(mod: IRModule, rewriter: PyExprMutator) -> IRModule:
    """``mod`` with each Relax function replaced by ``rewriter``'s rewrite of it (``rewriter``
    built on ``mod``); ``mod`` itself when no function changes."""
    changed = False
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            new = rewriter.visit_expr(func)
            if not new.same_as(func):
                rewriter.builder_.update_func(gv, new)
                changed = True
    return rewriter.builder_.get() if changed else mod
