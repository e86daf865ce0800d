"""Stable names for the operator bindings of a Relax function.

The graph view, the planners and the passes all refer to operators by these ids, so a pass can
rewrite exactly the bindings a planner decided on. An id is the binding's variable name, made
unique with a ``.k`` suffix when Relax reuses a name hint.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass

import tvm
from tvm import relax


@dataclass(frozen=True)
class OpBinding:
    """One operator call bound in a dataflow block.

    Attributes
    ----------
    node_id : str
        The stable id (unique within the function).
    block : int
        Index of the binding block in the function body.
    index : int
        Index of the binding inside its block.
    var : relax.Var
        The bound variable.
    call : relax.Call
        The call expression.
    """

    node_id: str
    block: int
    index: int
    var: relax.Var
    call: relax.Call


def iter_bindings(func: relax.Function) -> Iterator[tuple[int, int, relax.Binding]]:
    """Yield ``(block, index, binding)`` for every binding of ``func`` in program order."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return
    for b, block in enumerate(body.blocks):
        for i, binding in enumerate(block.bindings):
            yield b, i, binding


def op_bindings(func: relax.Function, skip_ops: frozenset[str] = frozenset()) -> list[OpBinding]:
    """All operator-call bindings of ``func`` with their stable ids, in program order.

    ``skip_ops`` leaves calls of those operators out, ids included: after ``PlaceOperators``,
    ``op_bindings(func, frozenset({COPY_OP}))`` gives every operator the id it had before the
    copies were added.
    """
    used: set[str] = set()
    result = []
    for b, i, binding in iter_bindings(func):
        value = binding.value
        if not isinstance(binding, relax.VarBinding) or not isinstance(value, relax.Call):
            continue
        if isinstance(value.op, tvm.ir.Op) and value.op.name in skip_ops:
            continue
        name = str(binding.var.name)
        node_id, k = name, 1
        while node_id in used:
            node_id, k = f"{name}.{k}", k + 1
        used.add(node_id)
        result.append(OpBinding(node_id, b, i, binding.var, value))
    return result


def function_named(mod: tvm.IRModule, name: str, owner: str) -> relax.Function:
    """``mod[name]``, or a ``ValueError`` that names ``owner`` (the pass asking) and the
    functions the module has."""
    names = [gv.name_hint for gv in mod.get_global_vars()]
    if name not in names:
        raise ValueError(f"{owner}: no function {name!r}; functions: {names}")
    return mod[name]


def calls_op(expr: relax.Expr, name: str) -> bool:
    """Whether ``expr`` is a call of the Relax operator ``name`` (``relax.call_tir``,
    ``relax.nn.conv2d``...)."""
    return calls_one_of(expr, (name,))


def calls_one_of(expr: relax.Expr, names: Collection[str]) -> bool:
    """Whether ``expr`` is a call of one of the Relax operators ``names``."""
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name in names
