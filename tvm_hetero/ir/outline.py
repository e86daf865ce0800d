"""Outline a group of bindings into a function of its own (the profiler and the unit pass share it).

The group's free tensors (function inputs, other bindings' results, weight constants the caller
chooses to lift) become parameters; what the group defines and the rest of the program reads
becomes its result (one value, or a tuple in definition order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tvm
from tvm import relax

from tvm_hetero._compat import TensorType, TupleType
from tvm_hetero.ir.attrs import CALL_TIR_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import calls_op


def plain_type(ty: relax.Type) -> relax.Type:
    """The type without its vdevice: a workload does not depend on where it was placed."""
    if isinstance(ty, TensorType):
        return (
            TensorType(ty.shape, ty.dtype)
            if ty.shape is not None
            else TensorType(None, ty.dtype, ndim=ty.ndim)
        )
    if isinstance(ty, TupleType):
        return relax.TupleType([plain_type(f) for f in ty.fields])
    return ty


def leaf_inputs(expr: relax.Expr) -> list[relax.Expr]:
    """Variables and constants an expression reads, in the order first met."""
    found: dict[relax.Expr, None] = {}  # a dict: list membership would call Expr.__eq__

    def visit(e: relax.Expr) -> None:
        if isinstance(e, relax.Var | tvm.ir.expr.Constant):
            found[e] = None

    relax.analysis.post_order_visit(expr, visit)
    return list(found)


def substitute(
    expr: relax.Expr,
    remap: dict,
    bb: relax.BlockBuilder,
    mod: tvm.IRModule,
    type_of: Callable[[relax.Type], relax.Type] = plain_type,
    kernels: relax.BlockBuilder | None = None,
) -> relax.Expr:
    """``expr`` with variables replaced by ``remap``, rebuilt so the builder infers its type;
    kernels it calls (``call_tir``) are added to ``kernels``' module (default ``bb``'s), and the
    call names them as that module does."""
    kernels = kernels or bb
    if isinstance(expr, relax.Var | tvm.ir.expr.Constant):
        return remap.get(expr, expr)
    if isinstance(expr, relax.Tuple):
        return relax.Tuple([substitute(f, remap, bb, mod, type_of, kernels) for f in expr.fields])
    if isinstance(expr, relax.TupleGetItem):
        inner = substitute(expr.tuple_value, remap, bb, mod, type_of, kernels)
        return relax.TupleGetItem(inner, expr.index)
    if isinstance(expr, relax.Call):
        args = [substitute(a, remap, bb, mod, type_of, kernels) for a in expr.args]
        if calls_op(expr, CALL_TIR_OP):
            args[0] = kernels.add_func(mod[expr.args[0]], expr.args[0].name_hint)
        return relax.Call(expr.op, args, expr.attrs, [type_of(t) for t in expr.ty_args])
    return expr


def emit_group(
    bb: relax.BlockBuilder,
    bindings: Sequence[relax.Binding],
    outputs: Sequence[relax.Var],
    remap: dict,
    mod: tvm.IRModule,
    type_of: Callable[[relax.Type], relax.Type] = plain_type,
    kernels: relax.BlockBuilder | None = None,
) -> relax.Expr:
    """Emit ``bindings`` into the open dataflow block of ``bb``; return the function's result.

    ``remap`` maps the group's free inputs to the new function's parameters and is extended with
    every emitted binding; the kernels they call go to ``kernels`` (default ``bb``).
    """
    results = []
    for b in bindings:
        value = substitute(b.value, remap, bb, mod, type_of, kernels)
        emit = bb.emit_output if b.var in outputs else bb.emit
        remap[b.var] = emit(value, name_hint=str(b.var.name))
        if b.var in outputs:
            results.append(remap[b.var])
    return results[0] if len(results) == 1 else bb.emit_output(relax.Tuple(results))


def outline_module(
    mod: tvm.IRModule,
    bindings: Sequence[relax.Binding],
    outputs: Sequence[relax.Var],
    lift_constants: bool = True,
) -> tvm.IRModule:
    """A module whose ``main`` computes ``outputs`` from ``bindings`` alone; every free tensor
    becomes a parameter ``in0, in1, ...`` with its vdevice dropped. Weight constants become
    parameters too unless ``lift_constants`` is false: then they stay constants, which the build
    folds and lays out as it does in the whole model."""
    defined = {b.var for b in bindings}
    free: dict[relax.Expr, relax.Var] = {}
    for b in bindings:
        for e in leaf_inputs(b.value):
            if not lift_constants and isinstance(e, tvm.ir.expr.Constant):
                continue
            if e not in defined and e not in free and isinstance(e.ty, TensorType | TupleType):
                free[e] = relax.Var(f"in{len(free)}", plain_type(e.ty))
    bb = relax.BlockBuilder()
    with bb.function(ENTRY_FUNC, list(free.values())):
        with bb.dataflow():
            out = emit_group(bb, bindings, outputs, dict(free), mod)
        bb.emit_func_output(out)
    return bb.get()


def closure(bindings: Sequence, ops: dict, wanted: set[str]) -> set[relax.Var]:
    """Selected op vars plus non-op bindings (TupleGetItem, aliases) that read only from them."""
    inside: set[relax.Var] = set()
    for b in bindings:
        if b.var in ops:
            if ops[b.var] in wanted:
                inside.add(b.var)
        elif relax.analysis.free_vars(b.value) and all(
            v in inside for v in relax.analysis.free_vars(b.value)
        ):
            inside.add(b.var)
    return inside


def used_outside(bindings: Sequence, inside: set[relax.Var], result: relax.Expr) -> list[relax.Var]:
    """Vars defined in ``inside`` that other bindings or ``result`` read, in program order."""
    outside_uses: set[relax.Var] = set(relax.analysis.free_vars(result))
    for b in bindings:
        if b.var not in inside:
            outside_uses.update(relax.analysis.free_vars(b.value))
    return [b.var for b in bindings if b.var in inside and b.var in outside_uses]
