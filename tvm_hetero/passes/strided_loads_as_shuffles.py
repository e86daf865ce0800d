"""StridedLoadsAsShuffles: a CPU kernel's vector read of every ``s``-th element as ``s`` whole
vector reads and one shuffle."""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir import IRModule
from tvm.ir.expr import Call, TensorLoad

from tvm_hetero._compat import PrimFunc
from tvm_hetero.ir.sblocks import with_children, with_prim_funcs
from tvm_hetero.passes.stack_loop_buffers import on_cpu

MAX_STRIDE = 4
"""The largest stride rewritten (``s`` loads for a vector of ``s``-fold span; 1: none is)."""
MIN_LANES = 4
"""The fewest lanes of a read rewritten."""
_BINARY = (
    tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod, tirx.Min,
    tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And, tirx.Or,
)  # fmt: skip


@tvm.transform.module_pass(opt_level=0, name="StridedLoadsAsShuffles")
class StridedLoadsAsShuffles:
    """Read each vector of every ``s``-th element of a CPU kernel's buffer (a load whose index
    is ``Ramp(base, s, lanes)``, ``1 < s <=`` :data:`MAX_STRIDE`) as ``s`` vectors of
    consecutive elements and one ``Shuffle`` that keeps the lanes wanted.

    TVM's LLVM code generator reads a strided vector one lane at a time: a scalar load and an
    ``insertelement`` a lane, 32 instructions for 16 floats. A shuffle of whole vectors is one
    permute a pair with AVX-512 (``vpermt2ps``). The last of the ``s`` vectors starts
    ``s - 1`` elements early, so the reads cover exactly the elements the strided read did,
    from ``base`` to ``base + s * (lanes - 1)``: none outside the buffer. The values are the
    same elements; numbers are unchanged.

    Examples
    --------
    ``A[T.Ramp(b, 2, 16)]`` becomes ``T.Shuffle([A[T.Ramp(b, 1, 16)], A[T.Ramp(b + 15, 1,
    16)]], [0, 2, ..., 14, 17, 19, ..., 31])``.

    Notes
    -----
    Runs on the lowered TIR of the build's host functions, where vectorized loops have become
    ``Ramp`` indices (:func:`~tvm_hetero.build.multi_device.tir_pipeline`: before
    ``StackLoopBuffers``); only kernels under ``device_type`` CPU, only loads in stored values
    and ``let`` values, through the arithmetic, casts, selects and calls between (a load inside
    anything else is left as it is).
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return ``mod`` with its CPU kernels' strided vector reads shuffled (``mod`` if none
        is)."""
        return with_prim_funcs(mod, shuffled)


def shuffled(func: PrimFunc) -> PrimFunc:
    """``func`` with its strided vector reads under ``device_type`` CPU as shuffles."""
    body = _walk(func.body, cpu=False)
    return func if body.same_as(func.body) else func.with_body(body)


def _walk(stmt: tirx.Stmt, cpu: bool) -> tirx.Stmt:
    cpu = on_cpu(stmt, cpu)
    if cpu and isinstance(stmt, tirx.BufferStore):
        value = _expr(stmt.value)
        return stmt if value.same_as(stmt.value) else tirx.BufferStore(
            stmt.buffer, value, list(stmt.indices)
        )  # fmt: skip
    if cpu and isinstance(stmt, tirx.LetStmt):
        value = _expr(stmt.value)
        return stmt if value.same_as(stmt.value) else tirx.LetStmt(stmt.var, value)
    return with_children(stmt, lambda child: _walk(child, cpu))


def _expr(expr):
    """``expr`` with the strided vector loads it holds shuffled (``expr`` where none is)."""
    if isinstance(expr, TensorLoad):
        shuffle = as_shuffle(expr)
        return expr if shuffle is None else shuffle
    if isinstance(expr, _BINARY):
        a, b = _expr(expr.a), _expr(expr.b)
        return expr if a.same_as(expr.a) and b.same_as(expr.b) else type(expr)(a, b)
    if isinstance(expr, tirx.Cast):
        value = _expr(expr.value)
        return expr if value.same_as(expr.value) else tirx.Cast(expr.ty, value)
    if isinstance(expr, tirx.Broadcast):
        value = _expr(expr.value)
        return expr if value.same_as(expr.value) else tirx.Broadcast(value, expr.lanes)
    if isinstance(expr, tirx.Select):
        old = (expr.condition, expr.true_value, expr.false_value)
        parts = [_expr(p) for p in old]
        same = all(a.same_as(b) for a, b in zip(parts, old, strict=True))
        return expr if same else tirx.Select(*parts)
    if isinstance(expr, Call):
        args = [_expr(a) for a in expr.args]
        if all(a.same_as(b) for a, b in zip(args, expr.args, strict=True)):
            return expr
        return Call(expr.op, args, attrs=expr.attrs, ty_args=list(expr.ty_args), ret_ty=expr.ty)
    return expr


def as_shuffle(load: TensorLoad):
    """``load`` as whole-vector loads and a ``Shuffle``, or ``None`` where its index is no
    ``Ramp`` of a constant stride from 2 to :data:`MAX_STRIDE` over :data:`MIN_LANES` lanes or
    more."""
    if len(load.indices) != 1 or not isinstance(load.indices[0], tirx.Ramp):
        return None
    ramp = load.indices[0]
    if not isinstance(ramp.stride, tirx.IntImm) or not isinstance(ramp.lanes, tirx.IntImm):
        return None
    stride, lanes = int(ramp.stride), int(ramp.lanes)
    if not 1 < stride <= MAX_STRIDE or lanes < MIN_LANES:
        return None
    starts = [k * lanes for k in range(stride - 1)] + [(stride - 1) * (lanes - 1)]
    parts = [tirx.BufferLoad(load.source, [tirx.Ramp(ramp.base + s if s else ramp.base, 1, lanes)])
             for s in starts]  # fmt: skip
    whole = (stride - 1) * lanes  # elements the first loads hold; the last holds the rest
    picks = [p if p < whole else whole + p - starts[-1] for p in range(0, stride * lanes, stride)]
    return tirx.Shuffle(parts, [tirx.IntImm("int32", p) for p in picks])
