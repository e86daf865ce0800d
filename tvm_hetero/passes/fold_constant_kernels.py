"""FoldConstantKernels: kernels of constants evaluated at compile time, a round in one build."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero._compat import PrimFunc, TensorType
from tvm_hetero.ir.attrs import CALL_TIR_OP

MAX_ROUNDS = 8
"""Rounds at most (a kernel of constants whose input was folded the round before waits for the
next round; chains of weight layout changes are two or three long)."""


@tvm.transform.module_pass(opt_level=0, name="FoldConstantKernels")
class FoldConstantKernels:
    """Replace each ``call_tir`` whose inputs are all constants by its value, as TVM's
    ``FoldConstant`` does, compiling all of a round's kernels in one build.

    ``FoldConstant`` compiles each kernel it folds as a library of its own (``tir.build``, then
    LLVM): 25-30 ms each on this project's hosts, 3.99 s of the 8.6 s that five tiny zoo models
    took to compile (46 %; 2026-12-02). Here a round gathers every ``call_tir`` whose arguments
    are constants (or variables bound to constants), compiles their kernels together for the
    host CPU and binds each call's variable to its value; the next round folds the calls those
    values made constant. A round whose build fails folds nothing, and ``FoldConstant`` (which
    the pipelines run after this pass) tries the kernels one at a time and skips those it
    cannot build, as before.

    Notes
    -----
    Only a ``call_tir`` with one static-shape tensor output and no TIR arguments is folded (as
    ``FoldConstant`` folds); the kernels are left in the module (``DeadCodeElimination``
    removes those no longer called). Values are computed on the CPU, as ``FoldConstant``'s
    are, whichever device the kernel is placed on.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with every kernel of constants replaced by its value."""
        calls = _Folder(mod, {}).foldable(mod)
        for _ in range(MAX_ROUNDS):
            values = _evaluate(mod, calls) if calls else None
            if values is None:
                break
            folder = _Folder(mod, values)
            mod = folder.fold(mod)
            calls = folder.calls  # those the round's values made foldable: the next round's
        return mod


Key = tuple[str, tuple[Constant, ...]]


def _key(call: relax.Call) -> Key | None:
    """``(kernel, constant arguments)`` of a foldable ``call_tir``, else None."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == CALL_TIR_OP):
        return None
    if len(call.args) != 2 or len(call.ty_args) != 1:
        return None
    out = call.ty_args[0]
    if not isinstance(out, TensorType) or not isinstance(out.shape, relax.ShapeExpr):
        return None
    if not all(isinstance(v, tvm.tirx.IntImm) for v in out.shape.values):
        return None
    args = call.args[1].fields
    if not all(isinstance(a, Constant) for a in args):
        return None
    return call.args[0].name_hint, tuple(args)


@mutator
class _Folder(PyExprMutator):
    """Variables bound to constants replaced by the constants, each foldable call with a value
    in ``values`` replaced by it, and the other foldable calls gathered."""

    def __init__(self, mod: IRModule, values: dict[Key, tvm.runtime.Tensor]) -> None:
        super().__init__(mod)
        self.values = values
        self.calls: dict[Key, relax.Call] = {}

    def foldable(self, mod: IRModule) -> dict[Key, relax.Call]:
        for _, func in mod.functions_items():
            if isinstance(func, relax.Function):
                self.visit_expr(func)
        return self.calls

    def fold(self, mod: IRModule) -> IRModule:
        out = mod.clone()
        for gv, func in mod.functions_items():
            if isinstance(func, relax.Function):
                out[gv] = relax.analysis.remove_all_unused(self.visit_expr(func))
        return out

    def visit_var_(self, op: relax.Var) -> relax.Expr:
        bound = self.lookup_binding(op)
        return bound if isinstance(bound, Constant) else super().visit_var_(op)

    def visit_dataflow_var_(self, op: relax.DataflowVar) -> relax.Expr:
        bound = self.lookup_binding(op)
        return bound if isinstance(bound, Constant) else super().visit_dataflow_var_(op)

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = super().visit_call_(op)
        key = _key(call)
        if key is None:
            return call
        if key in self.values:
            return relax.const(self.values[key])
        self.calls.setdefault(key, call)
        return call


def _evaluate(mod: IRModule, calls: dict[Key, relax.Call]) -> dict[Key, tvm.runtime.Tensor] | None:
    """Each call's value, its kernels compiled in one library for the host CPU; None when that
    build fails."""
    kernels = {name for name, _ in calls}
    symbols = {name: f"fold_{k}" for k, name in enumerate(sorted(kernels))}
    lib_mod = IRModule(
        {
            tvm.ir.GlobalVar(symbols[gv.name_hint]): func.with_attr(
                "global_symbol", symbols[gv.name_hint]
            )
            for gv, func in mod.functions_items()
            if isinstance(func, PrimFunc) and gv.name_hint in kernels
        }
    )
    try:
        lib = tvm.tirx.build(lib_mod, target="llvm")
    except Exception:  # whatever the build raised: FoldConstant tries them one at a time
        return None
    values = {}
    for key, call in calls.items():
        out = call.ty_args[0]
        shape = [int(v) for v in out.shape.values]
        result = tvm.runtime.empty(shape, out.dtype, tvm.cpu(0))
        lib[symbols[key[0]]](*[a.value for a in key[1]], result)
        values[key] = result
    return values
