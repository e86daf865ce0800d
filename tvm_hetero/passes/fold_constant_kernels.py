"""FoldConstantKernels: kernels of constants evaluated at compile time, all in one build."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero._compat import PrimFunc, TensorType
from tvm_hetero.ir.attrs import CALL_TIR_OP
from tvm_hetero.ir.bindings import calls_op, iter_bindings
from tvm_hetero.ir.builder_scopes import module_without_seq_scopes


@tvm.transform.module_pass(opt_level=0, name="FoldConstantKernels")
class FoldConstantKernels:
    """Replace each ``call_tir`` computed from constants alone by its value, as TVM's
    ``FoldConstant`` does, compiling every such kernel in one build.

    ``FoldConstant`` compiles each kernel it folds as a library of its own (``tir.build``, then
    LLVM): 3.99 of the 8.6 s that five tiny zoo models took to compile, 8.7 of Swin-T's 19.6 s
    (2026-12-02). Here one walk of each function's bindings finds every ``call_tir`` whose
    arguments are constants or values of such calls (Swin-T's relative position tables are
    chains of 59 kernels), their kernels are compiled together for the host CPU, the calls run
    in binding order, and each is replaced by its value. Where that build fails nothing is
    folded, and ``FoldConstant`` (which the pipelines run after this pass) tries the kernels one
    at a time and skips those it cannot build, as before.

    Notes
    -----
    Only a ``call_tir`` with one static-shape tensor output and no TIR arguments, bound in a
    binding block at the top of a Relax function, is folded (``FoldConstant`` folds such calls
    anywhere); the kernels stay in the module (``DeadCodeElimination`` removes those no longer
    called). Values are computed on the CPU, as ``FoldConstant``'s are, whichever device the
    kernel is placed on.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with every kernel of constants replaced by its value."""
        bound: dict = {}  # variable -> the constant it is bound to
        calls: list[tuple[relax.Var, relax.Call]] = []
        for _, func in mod.functions_items():
            if isinstance(func, relax.Function):
                _constant_calls(func, bound, calls)
        values = _evaluate(mod, calls, bound) if calls else None
        if values is None:
            return mod
        folder = _Folder(mod, values)
        out = mod.clone()
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                out[gv] = relax.analysis.remove_all_unused(folder.visit_expr(func))
        return out


def _foldable(call: relax.Expr) -> bool:
    """Whether ``call`` is a ``call_tir`` with one static-shape tensor output, no TIR
    arguments."""
    if not calls_op(call, CALL_TIR_OP) or len(call.args) != 2 or len(call.ty_args) != 1:
        return False
    out = call.ty_args[0]
    return (
        isinstance(out, TensorType)
        and isinstance(out.shape, relax.ShapeExpr)
        and all(isinstance(v, tvm.tirx.IntImm) for v in out.shape.values)
    )


def _constant_calls(
    func: relax.Function, bound: dict, calls: list[tuple[relax.Var, relax.Call]]
) -> None:
    """Add to ``calls`` the calls of ``func``'s top binding blocks computed from constants
    alone, with their variables, in binding order (each after the calls its arguments come
    from), and to ``bound`` the variables bound to constants."""
    known = {var for var, _ in calls}
    for _, _, binding in iter_bindings(func):
        value = getattr(binding, "value", None)
        if isinstance(value, Constant):
            bound[binding.var] = value
        elif _foldable(value) and all(
            isinstance(a, Constant) or a in known or a in bound for a in value.args[1].fields
        ):
            known.add(binding.var)
            calls.append((binding.var, value))


def _evaluate(
    mod: IRModule, calls: list[tuple[relax.Var, relax.Call]], bound: dict
) -> dict[relax.Call, tvm.runtime.Tensor] | None:
    """Each call's value, in order, its kernels compiled in one library for the host CPU;
    None when that build fails."""
    kernels = sorted({c.args[0].name_hint for _, c in calls})
    symbols = {name: f"fold_{k}" for k, name in enumerate(kernels)}
    lib_mod = IRModule(
        {
            tvm.ir.GlobalVar(symbols[gv.name_hint]): func.with_attr(
                "global_symbol", symbols[gv.name_hint]
            )
            for gv, func in mod.functions_items()
            if isinstance(func, PrimFunc) and gv.name_hint in symbols
        }
    )
    try:
        lib = tvm.tirx.build(module_without_seq_scopes(lib_mod), target="llvm")
    except Exception:  # whatever the build raised: FoldConstant tries them one at a time
        return None
    values: dict[relax.Call, tvm.runtime.Tensor] = {}
    of_var = {var: constant.value for var, constant in bound.items()}
    for var, call in calls:
        out = call.ty_args[0]
        result = tvm.runtime.empty([int(v) for v in out.shape.values], out.dtype, tvm.cpu(0))
        args = [a.value if isinstance(a, Constant) else of_var[a] for a in call.args[1].fields]
        lib[symbols[call.args[0].name_hint]](*args, result)
        values[call] = of_var[var] = result
    return values


@mutator
class _Folder(PyExprMutator):
    """Each call with a value replaced by it, and variables bound to constants by the
    constants."""

    def __init__(self, mod: IRModule, values: dict[relax.Call, tvm.runtime.Tensor]) -> None:
        super().__init__(mod)
        self.values = values

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        if op in self.values:
            return relax.const(self.values[op])
        return super().visit_call_(op)

    def visit_var_(self, op: relax.Var) -> relax.Expr:
        bound = self.lookup_binding(op)
        return bound if isinstance(bound, Constant) else super().visit_var_(op)

    def visit_dataflow_var_(self, op: relax.DataflowVar) -> relax.Expr:
        bound = self.lookup_binding(op)
        return bound if isinstance(bound, Constant) else super().visit_dataflow_var_(op)
