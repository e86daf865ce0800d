"""Reading a reduction block as ``C[batch, I, J] += A[batch, I, K] * B[batch, J, K]``.

dlight's ``get_index_map`` answers this for GPU matmuls, with two habits that cost CPU kernels
dearly: it counts an axis of extent 1 as no axis, so a batch-1 dense layer (``x[1, K] @ W``) has
no ``I`` and is declined; and it takes the first read as ``A``, so a 1x1 convolution (data first)
becomes ``C[H * W, C_out]``: the weights are packed per call and the output written transposed.
Here ``B`` is the operand that the output's innermost axis indexes (its columns are the vector)
unless the caller names it (weights packed in panels of output channels for a 1x1 convolution
over a small map: ``COLUMNS_ATTR``), ``I`` may be absent, and reduction axes of extent 1 (a 1x1
window) are removed first.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import s_tir, tirx
from tvm.s_tir.dlight.gpu.matmul import IterKind, IterTrait, make_iter_fusion_index_map

S, I, J, K, T = (  # noqa: E741 (dlight's names for the axes of C[S, I, J] += A * B)
    IterKind.kIter_S, IterKind.kIter_I, IterKind.kIter_J, IterKind.kIter_K, IterKind.kIter_T,
)  # fmt: skip
ORDERS = {"block": (S, I, J, K), "a": (S, I, K), "b": (S, J, K), "c": (S, I, J)}
"""The normalized axes of the block and of each operand."""


@dataclass(frozen=True)
class GemmForm:
    """Which reads are ``A`` and ``B``, and the index maps to ``[batch, I, J, K]`` form."""

    a: int
    b: int
    block_map: tirx.IndexMap
    a_map: tirx.IndexMap
    b_map: tirx.IndexMap
    c_map: tirx.IndexMap


def gemm_form(block: s_tir.SBlock, columns: str | None = None) -> GemmForm | None:
    """``block`` as a (batched) matmul, or ``None`` when it is not one; ``columns``: the name of
    the buffer to take as ``B`` where ``block`` reads it (else the read the output's innermost
    axis indexes)."""
    if len(block.reads) != 2 or len(block.writes) != 1 or not _plain_indices(block):
        return None  # a window (y + ry), a stride (2 * y) or a slice
    axes = [_axes(region) for region in (*block.reads, block.writes[0])]
    innermost = _axes_of(block.writes[0].region[-1].min)
    b = 0 if innermost & axes[0] and not innermost & axes[1] else 1
    named = [k for k, read in enumerate(block.reads) if str(read.source.name) == columns]
    if columns is not None and len(named) == 1:
        b = named[0]
    a_axes, b_axes, c_axes = axes[1 - b], axes[b], axes[2]
    traits = {}
    for iv in block.iter_vars:
        var = iv.var
        if isinstance(iv.dom.extent, tirx.IntImm) and int(iv.dom.extent) == 1:
            kind = T
        elif iv.iter_type == tirx.IterVar.CommReduce and var in a_axes and var in b_axes:
            kind = K if var not in c_axes else None
        elif iv.iter_type == tirx.IterVar.DataPar and var in c_axes:
            kind = {(True, True): S, (True, False): I, (False, True): J}.get(
                (var in a_axes, var in b_axes)
            )
        else:
            kind = None
        if kind is None:
            return None
        traits[var] = IterTrait(kind, iv.dom.extent)
    if not {J, K} <= {t.kind for t in traits.values()}:
        return None

    def index_map(name: str, used: set | None) -> tirx.IndexMap:
        kept = [traits[iv.var] for iv in block.iter_vars if used is None or iv.var in used]
        return make_iter_fusion_index_map(kept, list(ORDERS[name]))

    return GemmForm(1 - b, b, index_map("block", None), index_map("a", a_axes),
                    index_map("b", b_axes), index_map("c", c_axes))  # fmt: skip


def drop_unit_reductions(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> None:
    """Remove ``block``'s reduction iterators of extent 1 (their value is 0).

    A 1x1 convolution reads ``x[c, y + ry, x + rx]`` with ``ry, rx < 1``: without them it is a
    matmul of the weights ``[C_out, C_in]`` by the image ``[C_in, H * W]`` (``y`` and ``x`` fuse
    into the columns).
    """
    stmt = sch.get(block)
    unit = [
        iv.iter_type == tirx.IterVar.CommReduce
        and isinstance(iv.dom.extent, tirx.IntImm)
        and int(iv.dom.extent) == 1
        for iv in stmt.iter_vars
    ]
    if not any(unit) or all(unit):
        return
    keep = [not drop for drop in unit]
    sch.transform_block_layout(
        block,
        tirx.IndexMap.from_func(
            lambda *vs: [v for v, k in zip(vs, keep, strict=True) if k], ndim=len(unit)
        ),
    )


def _axes(region: s_tir.BufferRegion) -> set[tirx.Var]:
    """The iterators one element access of ``region`` uses."""
    axes = set()
    for r in region.region:
        axes |= _axes_of(r.min)
    return axes


def _axes_of(expr: tirx.PrimExpr) -> set[tirx.Var]:
    return set(tirx.analysis.undefined_vars(expr))


def _plain_indices(block: s_tir.SBlock) -> bool:
    """Whether every read index is a bare iterator, a constant, or an iterator split by a
    constant (``j // NR``, ``j % NR``: weights in panels), i.e. no windows, strides or slices."""
    return all(
        _plain(r.min) and isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1
        for read in block.reads
        for r in read.region
    )


def _plain(index: tirx.PrimExpr) -> bool:
    if isinstance(index, tirx.Var | tirx.IntImm):
        return True
    return (
        isinstance(index, tirx.FloorDiv | tirx.FloorMod)
        and isinstance(index.a, tirx.Var) and isinstance(index.b, tirx.IntImm)
    )  # fmt: skip
