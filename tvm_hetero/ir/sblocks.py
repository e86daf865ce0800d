"""Rebuilding TIR statements field by field (0.27's ``SBlock``, ``SBlockRealize`` and ``For``
have no ``replace``), a statement's children, its block realizes with their loops, a
buffer's bytes, an expression's variables replaced, and a module's TIR functions one by
one."""

from __future__ import annotations

import sys
from collections.abc import Callable

import tvm
from tvm import s_tir, tirx

from tvm_hetero._compat import PrimFunc


def block_with(block: s_tir.SBlock, **changes) -> s_tir.SBlock:
    """``block`` with some of its fields replaced."""
    fields = {
        "iter_vars": block.iter_vars, "reads": block.reads, "writes": block.writes,
        "name_hint": block.name_hint, "body": block.body, "init": block.init,
        "alloc_buffers": block.alloc_buffers, "match_buffers": block.match_buffers,
        "annotations": block.annotations, **changes,
    }  # fmt: skip
    return s_tir.SBlock(**fields)


def realize_with(realize: s_tir.SBlockRealize, **changes) -> s_tir.SBlockRealize:
    """``realize`` with some fields of its block replaced (:func:`block_with`), bound as
    before."""
    return s_tir.SBlockRealize(
        realize.iter_values, realize.predicate, block_with(realize.block, **changes)
    )


def loop_with(loop: tirx.For, **changes) -> tirx.For:
    """``loop`` with some of its fields replaced."""
    fields = {
        "loop_var": loop.loop_var, "min": loop.min, "extent": loop.extent, "kind": loop.kind,
        "body": loop.body, "thread_binding": loop.thread_binding,
        "annotations": loop.annotations, **changes,
    }  # fmt: skip
    return tirx.For(**fields)


def with_children(stmt: tirx.Stmt, visit: Callable[[tirx.Stmt], tirx.Stmt]) -> tirx.Stmt:
    """``stmt`` with ``visit`` applied to each statement it holds (a sequence's statements, the
    body of a loop, an attribute or a block, a condition's branches), rebuilt only where one
    changed; ``stmt`` itself where none did, and for every other kind."""
    if isinstance(stmt, tirx.SeqStmt):
        seq = [visit(s) for s in stmt.seq]
        unchanged = all(a.same_as(b) for a, b in zip(seq, stmt.seq, strict=True))
        return stmt if unchanged else tirx.SeqStmt(seq)
    if isinstance(stmt, tirx.IfThenElse):
        then = visit(stmt.then_case)
        other = None if stmt.else_case is None else visit(stmt.else_case)
        if then.same_as(stmt.then_case) and (other is None or other.same_as(stmt.else_case)):
            return stmt
        return tirx.IfThenElse(stmt.condition, then, other)
    if isinstance(stmt, s_tir.SBlockRealize):
        body = visit(stmt.block.body)
        return stmt if body.same_as(stmt.block.body) else realize_with(stmt, body=body)
    if not isinstance(stmt, tirx.For | tirx.While | tirx.AttrStmt):
        return stmt
    body = visit(stmt.body)
    if body.same_as(stmt.body):
        return stmt
    if isinstance(stmt, tirx.For):
        return loop_with(stmt, body=body)
    if isinstance(stmt, tirx.While):
        return tirx.While(stmt.condition, body)
    return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, body)


def buffer_bytes(buffer: tirx.Buffer) -> int | None:
    """Bytes of ``buffer`` (of every lane of a vector type: a lowered kernel's buffer may hold
    ``float32x16``), or ``None`` where its shape is not constant."""
    count = 1
    for extent in buffer.shape:
        if not isinstance(extent, tirx.IntImm):
            return None
        count *= int(extent)
    dtype = tvm.DataType(str(buffer.dtype))
    return count * dtype.bits * dtype.lanes // 8


def realizes(stmt: tirx.Stmt, loops: list | None = None) -> list[tuple]:
    """``(realize, loops)`` for every block realize under ``stmt``, in the order they run, with
    the loops around it under ``stmt`` (outermost first; after ``loops``, those around
    ``stmt``)."""
    loops = loops or []
    if isinstance(stmt, tirx.For):
        return realizes(stmt.body, [*loops, stmt])
    if isinstance(stmt, tirx.SeqStmt):
        return [found for s in stmt.seq for found in realizes(s, loops)]
    if isinstance(stmt, s_tir.SBlockRealize):
        return [(stmt, loops), *realizes(stmt.block.body, loops)]
    if isinstance(stmt, tirx.IfThenElse):
        cases = [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
        return [found for s in cases for found in realizes(s, loops)]
    body = getattr(stmt, "body", None)
    return [] if body is None else realizes(body, loops)


DEEP_WALK_FRAMES = 100_000
"""Python frames a walk of a TIR function may nest (:func:`with_prim_funcs`). A walk recurses
once a statement: Mamba's selective scan from transformers, unrolled over 128 tokens by its
export, lowers to a host function whose statements nest 520 deep, two or three frames a level, past
Python's default limit of 1,000 (``RecursionError`` from ``tvm-hetero compile``)."""


def substituted(expr: tirx.PrimExpr, values: dict) -> tirx.PrimExpr:
    """``expr`` with the variables in ``values`` replaced by their values (``expr`` itself
    where ``values`` is empty)."""
    if not values:
        return expr
    names = list(values)
    return tirx.IndexMap(names, [expr], None).map_indices([values[v] for v in names])[0]


def with_prim_funcs(mod: tvm.IRModule, change: Callable[[PrimFunc], PrimFunc]) -> tvm.IRModule:
    """``mod`` with ``change`` applied to each of its TIR functions (``change`` returns a
    function itself where it changes nothing; ``mod`` itself where none changes), with room
    for :data:`DEEP_WALK_FRAMES` frames."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, DEEP_WALK_FRAMES))
    try:
        changed = {
            gv: new
            for gv, func in mod.functions_items()
            if isinstance(func, PrimFunc) and (new := change(func)) is not func
        }
    finally:
        sys.setrecursionlimit(limit)
    if not changed:
        return mod
    functions = {gv: changed.get(gv, func) for gv, func in mod.functions_items()}
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
