"""Running one Relax expression mutator over every Relax function of a module."""

from __future__ import annotations

from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator


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
