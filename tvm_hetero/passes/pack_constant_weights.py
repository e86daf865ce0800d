"""PackConstantWeights: store constant matmul weights of CPU kernels in register-tile panels."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, s_tir, tirx
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.s_tir.dlight.gpu.matmul import get_reduction_blocks

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.attrs import CALL_TIR_OP
from tvm_hetero.ir.bindings import op_bindings
from tvm_hetero.schedules.cpu.common import output_bits
from tvm_hetero.schedules.cpu.gemm_form import gemm_form
from tvm_hetero.schedules.cpu.matmul import panel_width


@tvm.transform.module_pass(opt_level=0, name="PackConstantWeights")
class PackConstantWeights:
    """Lay out constant ``[K, N]`` matmul weights of CPU kernels as ``[N / NR, K, NR]`` panels.

    The CPU matmul rule's register tile reads ``NR`` consecutive columns of ``B`` for each ``k``;
    in ``[K, N]`` layout those rows lie ``N`` elements apart (a new page every few ``k`` for wide
    layers), in panels they are consecutive. Doing the layout change once at compile time costs
    nothing at run time (packing per call costs a pass over the weights). ``NR`` is the rule's
    (two vectors of the kernel's target). Every Relax function's calls count: in a deployment the
    kernels are called by the units, not by ``main`` (before this, units kept ``[K, N]`` weights
    and a two-stage ViT ran its halves 1.4x slower than the whole model).

    Notes
    -----
    Run after ``FuseTIR`` and ``RestoreKernelTargets`` (kernels carry targets, weights are
    ``call_tir`` constants). A kernel is rewritten only when it is a matmul the rule tiles
    (``panel_width``, the rule's own test and tile width), its target is a CPU, and every call
    passes a constant at that argument; its ``B`` buffer becomes the panel layout (a new kernel
    ``<name>_panels``; the old one is left for ``DeadCodeElimination``), so numbers are unchanged.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Rewrite the kernels and their constants; ``mod`` is left unchanged."""
        calls: dict[tvm.ir.GlobalVar, list[relax.Call]] = {}
        for _, func in mod.functions_items():  # main, and the units a deployment calls
            if not isinstance(func, relax.Function):
                continue
            for b in op_bindings(func):
                if isinstance(b.call.op, tvm.ir.Op) and b.call.op.name == CALL_TIR_OP:
                    calls.setdefault(b.call.args[0], []).append(b.call)
        packed = {}
        for gv, sites in calls.items():
            func = mod[gv]
            found = _packed_kernel(func) if isinstance(func, PrimFunc) else None
            if found is None:
                continue
            index, nr, new_func = found
            if all(isinstance(c.args[1].fields[index], Constant) for c in sites):
                packed[gv] = (index, nr, new_func)
        if not packed:
            return mod
        return _Repacker(mod, packed).run()


def _packed_kernel(func: PrimFunc) -> tuple[int, int, PrimFunc] | None:
    """``(argument index, NR, kernel reading that argument as panels)`` or ``None``."""
    target = func.attrs.get("target") if func.attrs else None
    if target is None or str(target.kind.name) != "llvm":
        return None
    sch = s_tir.Schedule(func)
    reductions = get_reduction_blocks(sch, sch.get_child_blocks(sch.get_sblock("root")))
    if not reductions or len(reductions) != 1 or gemm_form(sch.get(reductions[0])) is None:
        return None
    main = reductions[0]
    block = sch.get(main)
    reduce = [iv.var for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    out_shape = [int(s) for s in block.writes[0].source.shape]
    bits = output_bits(sch, main)
    nr = panel_width(target, bits, out_shape[-1])
    if nr is None:
        return None  # not a kernel the matmul rule tiles
    params = [str(p.name) for p in func.params]
    for i, read in enumerate(block.reads):
        buf = read.source
        if len(buf.shape) != 2 or str(buf.name) not in params:
            continue
        row, col = (r.min for r in read.region)
        if not (isinstance(row, tirx.Var) and any(row.same_as(v) for v in reduce)):
            continue
        if not (isinstance(col, tirx.Var) and not any(col.same_as(v) for v in reduce)):
            continue
        if int(buf.shape[1]) != out_shape[-1]:
            return None
        sch.transform_layout(main, ("read", i), _panels(nr))
        return params.index(str(buf.name)), nr, sch.mod["main"].with_attrs(func.attrs)
    return None


def _panels(nr: int):
    """Index map ``[K, N] -> [N / nr, K, nr]``."""
    return lambda k, j: (j // nr, k, j % nr)


@mutator
class _Repacker(PyExprMutator):
    def __init__(self, mod: IRModule, packed: dict) -> None:
        super().__init__(mod)
        self.mod_, self.packed = mod, packed

    def run(self) -> IRModule:
        # a new GlobalVar per packed kernel: a GlobalVar keeps the type of its first function
        self.kernels = {
            kernel: self.builder_.add_func(new_func, f"{kernel.name_hint}_panels")
            for kernel, (_, _, new_func) in self.packed.items()
        }
        for gv, func in self.mod_.functions_items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gv, self.visit_expr(func))
        return self.builder_.get()

    def visit_call_(self, call: relax.Call) -> relax.Expr:  # pylint: disable=arguments-renamed
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == CALL_TIR_OP):
            return call
        found = self.packed.get(call.args[0])
        if found is None:
            return call
        index, nr, _ = found
        fields = list(call.args[1].fields)
        weight = fields[index].value.numpy()
        k, n = weight.shape
        panels = np.ascontiguousarray(weight.reshape(k, n // nr, nr).transpose(1, 0, 2))
        fields[index] = relax.const(panels)
        kernel = self.kernels[call.args[0]]
        return relax.Call(call.op, [kernel, relax.Tuple(fields), *call.args[2:]],
                          call.attrs, call.ty_args)  # fmt: skip
