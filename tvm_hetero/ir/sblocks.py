"""Rebuilding TIR statements field by field (0.27's ``SBlock``, ``SBlockRealize`` and ``For``
have no ``replace``), and a module's TIR functions one by one."""

from __future__ import annotations

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


def with_prim_funcs(mod: tvm.IRModule, change: Callable[[PrimFunc], PrimFunc]) -> tvm.IRModule:
    """``mod`` with ``change`` applied to each of its TIR functions (``change`` returns a
    function itself where it changes nothing; ``mod`` itself where none changes)."""
    changed = {
        gv: new
        for gv, func in mod.functions_items()
        if isinstance(func, PrimFunc) and (new := change(func)) is not func
    }
    if not changed:
        return mod
    functions = {gv: changed.get(gv, func) for gv, func in mod.functions_items()}
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
