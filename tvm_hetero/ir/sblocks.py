"""Rebuilding TIR blocks field by field (0.27's ``SBlock`` has no ``replace``)."""

from __future__ import annotations

from tvm import s_tir


def block_with(block: s_tir.SBlock, **changes) -> s_tir.SBlock:
    """``block`` with some of its fields replaced."""
    fields = {
        "iter_vars": block.iter_vars, "reads": block.reads, "writes": block.writes,
        "name_hint": block.name_hint, "body": block.body, "init": block.init,
        "alloc_buffers": block.alloc_buffers, "match_buffers": block.match_buffers,
        "annotations": block.annotations, **changes,
    }  # fmt: skip
    return s_tir.SBlock(**fields)
