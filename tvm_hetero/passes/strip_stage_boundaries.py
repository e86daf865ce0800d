"""StripStageBoundaries: hand-placed pipeline cuts become plain aliases before a build."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_hetero.ir.markers import is_stage_boundary
from tvm_hetero.ir.mutate import mutate_functions


@tvm.transform.module_pass(opt_level=0, name="StripStageBoundaries")
class StripStageBoundaries:
    """Replace every ``stage_boundary(x)`` mark (:mod:`tvm_hetero.ir.markers`) by ``x``.

    The mark tells the pipeline planner where it may cut; it computes nothing, and the VM has no
    function of that name, so every build removes it first (``multi_device_lower``), and so does
    ``CarvePipelineStages``. Operator ids of the other bindings are unchanged: the mark's binding
    stays, as an alias.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module without marks (``mod`` itself when it has none)."""
        return mutate_functions(mod, _Strip(mod))


@mutator
class _Strip(PyExprMutator):
    def __init__(self, mod: IRModule) -> None:
        super().__init__(mod)

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        if is_stage_boundary(call):
            return self.visit_expr(call.args[1])
        return super().visit_call_(call)
