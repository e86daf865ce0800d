"""TIR that TVM's IR builder leaves for no one: the ``pragma_scope`` of its ``seq_scope``."""

from __future__ import annotations

import tvm
from tvm import tirx

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.sblocks import with_children, with_prim_funcs

SEQ_SCOPE = "pragma_scope"
"""The attribute ``tirx.script.builder.utils.seq_scope`` wraps a kernel's statements in (topi's
``scatter_nd``, which Swin-T's shifted windows export): LLVM's code generator knows no such
pragma and printed "Unknown pragma pragma_scope" on stderr for each one, 36 lines while Swin-T
compiled; the attribute changes no code."""


def without_seq_scopes(func: PrimFunc) -> PrimFunc:
    """``func`` with every ``pragma_scope`` attribute statement replaced by its body, where it
    lies under sequences, loops, conditions, blocks and other attributes (``func`` itself where
    none does)."""
    body = _strip(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


def _strip(stmt: tirx.Stmt) -> tirx.Stmt:
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == SEQ_SCOPE:
        return _strip(stmt.body)
    return with_children(stmt, _strip)


def module_without_seq_scopes(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with :func:`without_seq_scopes` applied to each of its TIR functions (``mod``
    itself where none changes)."""
    return with_prim_funcs(mod, without_seq_scopes)
