"""ExactCeilPools: pools in ``ceil_mode`` whose windows fit exactly are computed in floor mode."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.bindings import calls_one_of
from tvm_hetero.ir.mutate import rewrite_calls

POOLS = {
    f"relax.nn.{kind}_pool{n}d": getattr(relax.op.nn, f"{kind}_pool{n}d")
    for kind in ("max", "avg")
    for n in (1, 2, 3)
}
"""Each pool operator and the function that makes it."""


@tvm.transform.module_pass(opt_level=0, name="ExactCeilPools")
class ExactCeilPools:
    """Turn ``ceil_mode`` off on pools whose output it does not change.

    With ``ceil_mode`` TVM's pool kernels first copy the whole input into a buffer padded for
    a last window that may hang over the edge, even where none does. SqueezeNet's three max
    pools (3 x 3, stride 2, over 111, 55 and 27: windows that end on the last column) each
    copied their input for nothing: alone, in 7 interleaved rounds, 152, 80 and 39 us in ceil
    mode, 117, 60 and 29 in floor mode, ONNX Runtime 87, 48 and 27 (AMD EPYC, Zen 4, two
    threads); the whole model 4.90 -> 4.79 ms (ONNX Runtime 3.69, ``before_and_now.py``).
    Where, along every spatial axis, ``size + padding - dilation * (window - 1) - 1`` is
    divisible by the stride, the floor and the ceiling agree: the same windows, the same
    numbers, for max and average pools alike (no window reaches the extra padding).

    Notes
    -----
    Static spatial sizes only; pools of any device and layout (the layout names the spatial
    axes). Run before ``LegalizeOps``.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the exact pools in floor mode (``mod`` when none is)."""
        return rewrite_calls(mod, _floor_mode)


def exact(call: relax.Call) -> bool:
    """Whether ``call`` is a pool in ``ceil_mode`` whose windows end exactly on every axis."""
    if not calls_one_of(call, POOLS):
        return False
    a = call.attrs
    if not a.ceil_mode:
        return False
    shape = call.args[0].ty.shape
    if shape is None:
        return False
    spatial = [i for i, axis in enumerate(str(a.layout)) if axis in "DHW"]
    sizes = [shape.values[i] for i in spatial]
    if len(sizes) != len(a.pool_size) or not all(isinstance(s, tvm.tirx.IntImm) for s in sizes):
        return False
    n = len(sizes)
    for i, size in enumerate(sizes):
        padded = int(size) + int(a.padding[i]) + int(a.padding[n + i])
        reach = int(a.dilation[i]) * (int(a.pool_size[i]) - 1) + 1
        if padded < reach or (padded - reach) % int(a.strides[i]):
            return False
    return True


def _floor_mode(_rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not exact(call):
        return None
    a = call.attrs
    return POOLS[call.op.name](
        call.args[0], a.pool_size, a.strides, a.padding, a.dilation, False,
        bool(a.count_include_pad), a.layout, a.out_layout,
    )  # fmt: skip
