"""Running one Relax expression mutator over every Relax function of a module."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero.ir.attrs import COPY_OP
from tvm_hetero.ir.bindings import op_bindings

CallRewrite = Callable[[PyExprMutator, relax.Call], "relax.Expr | None"]
"""``rewrite(rewriter, call)``: the expression that replaces ``call`` (emitting what it needs
through ``rewriter.builder_``), or None to keep it; ``rewriter.mod_`` is the module."""


def bound_value(rewriter: PyExprMutator, expr: relax.Expr) -> relax.Expr:
    """What ``expr`` is bound to in the function ``rewriter`` is rewriting (a weight given as
    ``w = const`` reads as the constant), or ``expr`` itself when it is no variable bound there
    (a parameter, a constant)."""
    value = rewriter.lookup_binding(expr) if isinstance(expr, relax.Var) else None
    return expr if value is None else value


def output_channels_widened(
    rewriter: PyExprMutator, call: relax.Call, weights: np.ndarray, wide: int
) -> relax.Expr:
    """``call``, a convolution whose constant weights are ``weights`` (``[O, ...]``), computed
    over ``wide`` output channels, the added ones' weights zero, and its output cropped back to
    its ``O`` channels by a ``strided_slice`` (the convolution emitted through ``rewriter``)."""
    channels = weights.shape[0]
    padded = np.zeros((wide, *weights.shape[1:]), weights.dtype)
    padded[:channels] = weights
    conv = relax.Call(call.op, [call.args[0], relax.const(padded)], call.attrs)
    return relax.op.strided_slice(rewriter.builder_.emit(conv), axes=[1], begin=[0], end=[channels])


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


def rewrite_calls(mod: IRModule, rewrite: CallRewrite) -> IRModule:
    """``mod`` with each call of its Relax functions replaced where ``rewrite`` replaces it, the
    call's operands rewritten first; ``mod`` itself when nothing is (a CPU rewrite pass's body:
    the pass decides which calls and what they become, this walks the functions)."""
    return mutate_functions(mod, _CallRewriter(mod, rewrite))


@mutator
class _CallRewriter(PyExprMutator):
    def __init__(self, mod: IRModule, rewrite: CallRewrite) -> None:
        super().__init__(mod)
        self.mod_ = mod
        self.rewrite = rewrite

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        new = self.rewrite(self, call)
        return call if new is None else new


def with_marked_bindings(mod: IRModule, func_name: str) -> tuple[IRModule, dict[str, str]]:
    """``mod`` with every operator and copy binding of ``func_name`` renamed to a marker no pass
    makes (``_op0``, ``_op1``...), and each marker's id: an operator's as before its copies
    were placed (:func:`~.bindings.op_bindings` without ``to_vdevice``: the id the planners
    know it by), a copy's ``copy:`` and its own.

    A rewrite emits what it needs ahead of the binding it replaces, under names TVM's block
    builder makes afresh (``lv``, ``lv1``...): the names the frontend gave the operators, so a
    lowered binding's name alone cannot tell an operator from what a rewrite made for one.
    ``PlaceOperators``' copies are named so too, and counted among the bindings they shift
    the ids of the operators after them (``lv`` became ``lv.1`` behind a copy named ``lv``)."""
    operators = {b.var: b.node_id for b in op_bindings(mod[func_name], frozenset({COPY_OP}))}
    bindings = op_bindings(mod[func_name])
    marks = {b.var: f"_op{k}" for k, b in enumerate(bindings)}
    names = {f"_op{k}": operators.get(b.var, f"copy:{b.node_id}") for k, b in enumerate(bindings)}
    renamer = _Renamer(mod, marks)
    gv = mod.get_global_var(func_name)
    marked = IRModule(dict(mod.functions_items()), attrs=mod.attrs, global_infos=mod.global_infos)
    marked[gv] = renamer.visit_expr(mod[func_name])
    return marked, names


@mutator
class _Renamer(PyExprMutator):
    def __init__(self, mod: IRModule, marks: dict[relax.Var, str]) -> None:
        super().__init__(mod)
        self.marks = marks

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        mark = self.marks.get(binding.var)
        if mark is None:
            super().visit_var_binding_(binding)
            return
        value = self.visit_expr(binding.value)
        kind = relax.DataflowVar if isinstance(binding.var, relax.DataflowVar) else relax.Var
        var = kind(mark, binding.var.ty)
        self.builder_.emit_normalized(relax.VarBinding(var, value))
        self.set_var_remap(binding.var, var)
