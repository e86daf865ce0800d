"""CarvePipelineStages: a placed model cut into one function per pipeline stage."""

from __future__ import annotations

from collections.abc import Sequence

import tvm
from tvm import relax
from tvm.ir import IRModule

from tvm_hetero.ir.attrs import COPY_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import function_named, iter_bindings, op_bindings
from tvm_hetero.ir.markers import is_stage_boundary
from tvm_hetero.ir.units import group_of
from tvm_hetero.passes.outline_subgraph_units import OutlineSubgraphUnits
from tvm_hetero.passes.strip_stage_boundaries import StripStageBoundaries


@tvm.transform.module_pass(opt_level=0, name="CarvePipelineStages")
class CarvePipelineStages:
    """Cut ``main`` into stage functions ``unit{k}_d{device}``, stage ``k`` on its device.

    EdgePipe's stages: consecutive runs of layers, each built for its device and run by that
    device's worker; microbatches flow from stage to stage (the runtime's pipelined run). A
    stage is a unit of the runtime (``OutlineSubgraphUnits`` writes them: weights inside, copies
    between stages in ``main``). Hand-placed marks (``stage_boundary``) become aliases.

    Parameters
    ----------
    stages : sequence of sequence of str
        Operator ids of each stage, in pipeline order.

    Raises
    ------
    ValueError
        For an empty stage, an operator in two stages, an id the module lacks, or a stage that
        reads a later stage's result (stages must form a pipeline).
    """

    def __init__(self, stages: Sequence[Sequence[str]]) -> None:
        self.stages = [list(s) for s in stages]
        empty = [k for k, s in enumerate(self.stages) if not s]
        if not self.stages or empty:
            raise ValueError(f"CarvePipelineStages: stage(s) {empty or [0]} have no operators")
        self.stage_of = group_of(self.stages, "CarvePipelineStages", "stages")

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module whose ``main`` calls one function per stage."""
        func = function_named(mod, ENTRY_FUNC, "CarvePipelineStages")
        ops = op_bindings(func, frozenset({COPY_OP}))
        known = {b.node_id for b in ops}
        unknown = sorted(set(self.stage_of) - known)
        if unknown:
            raise ValueError(f"CarvePipelineStages: unknown operator id(s) {unknown[:5]}")
        self._check_order(func, ops)
        marks = {b.node_id for b in ops if is_stage_boundary(b.call)}  # aliases once stripped
        stages = [[op for op in s if op not in marks] for s in self.stages]
        return OutlineSubgraphUnits([s for s in stages if s])(StripStageBoundaries()(mod))

    def _check_order(self, func: relax.Function, ops: list) -> None:
        """Every operator reads only from its own stage or earlier ones (through copies, tuple
        items and aliases)."""
        source: dict[relax.Var, relax.Var] = {}
        for _, _, binding in iter_bindings(func):
            value = binding.value
            if isinstance(value, relax.Call) and value.op == tvm.ir.Op.get(COPY_OP):
                source[binding.var] = value.args[0]
            elif isinstance(value, relax.TupleGetItem):
                source[binding.var] = value.tuple_value
            elif isinstance(value, relax.Var):
                source[binding.var] = value
        stage_of_var: dict[relax.Var, int] = {}
        for b in ops:
            k = self.stage_of.get(b.node_id)
            for v in relax.analysis.free_vars(b.call):
                while v in source and isinstance(source[v], relax.Var):
                    v = source[v]
                src = stage_of_var.get(v)
                if k is not None and src is not None and src > k:
                    raise ValueError(
                        f"CarvePipelineStages: operator {b.node_id!r} of stage {k} reads a result "
                        f"of stage {src}; stages must run in pipeline order"
                    )
            if k is not None:
                stage_of_var[b.var] = k
