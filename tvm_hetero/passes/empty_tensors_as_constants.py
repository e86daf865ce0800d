"""EmptyTensorsAsConstants: an operator whose result has no elements computes nothing."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.types import static_shape

SCATTERS = {"relax.scatter_nd": (1, 2), "relax.scatter_elements": (1, 2)}
"""Scatters and their operands (indices, updates): with either empty, the data as it is."""


@tvm.transform.module_pass(opt_level=0, name="EmptyTensorsAsConstants")
class EmptyTensorsAsConstants:
    """Replace each operator call whose result is a tensor with a zero-length dimension by a
    constant of that (empty) shape, and each scatter whose indices or updates are empty by
    the data it would have written into.

    Exporters keep the arithmetic of cases that happen to be empty for the model's shapes:
    torchvision's Swin3D builds its shifted windows' attention mask from slices of the frames
    that, for 8 frames in windows of 8, have no elements, then scatters them back
    (``scatter_nd`` of ``[28, 21, 0]``). TVM's legalization of such a scatter divides by the
    empty dimension and aborted the build ("Divide by zero"). An empty result holds no value,
    so the constant is exact, and a scatter of nothing leaves its data as it was; what reads
    them is unchanged. Static shapes only: a symbolic dimension may not be empty at run time.
    The constant is given its dtype explicitly: ``relax.const`` of an empty ``int64`` array
    typed it ``int32``.

    Notes
    -----
    Applied at load (:func:`~tvm_hetero.frontends.load.from_irmodule`), so every strategy and
    the profiler see the model without them.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module without empty computations (``mod`` when it has none)."""
        return rewrite_calls(mod, _without_empty)


def empty_shape(ty) -> list[int] | None:
    """The static shape of tensor type ``ty`` where one of its dimensions is zero, else None."""
    dims = static_shape(ty) if isinstance(ty, relax.TensorType) else None
    return dims if dims is not None and 0 in dims else None


def _without_empty(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not isinstance(call.op, tvm.ir.Op):
        return None
    operands = SCATTERS.get(call.op.name)
    if operands and any(empty_shape(call.args[i].ty) is not None for i in operands):
        return call.args[0]
    ty = rewriter.builder_.normalize(call).ty
    dims = empty_shape(ty)
    if dims is None:
        return None
    dtype = str(ty.dtype)
    return relax.const(np.zeros(dims, dtype=dtype), dtype)
