"""GatheredWeightsInPlace: CPU products of each token with its own expert's weights read those
weights where they are, not from a copy of every token's."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.attrs import OP_PATTERN_ATTR, OUT_ELEMWISE_FUSABLE
from tvm_hetero.ir.bindings import calls_op
from tvm_hetero.ir.mutate import bound_value, rewrite_calls
from tvm_hetero.ir.split_dims import shape_of
from tvm_hetero.ir.types import cpu_tensor_target

MATMUL_OP, GATHER_OP = "relax.matmul", "relax.gather_nd"
KERNEL = "gathered_matvec"
IN_PLACE = True
"""Whether the pass rewrites anything (off: the gather and the products as TVM builds them,
for benchmarks)."""


@tvm.transform.module_pass(opt_level=0, name="GatheredWeightsInPlace")
class GatheredWeightsInPlace:
    """Compute a CPU batch of matrix-vector products whose matrices are gathered from constant
    weights by an index a batch item (``matmul(gather_nd(W, ids), x)`` or ``matmul(x,
    gather_nd(W, ids))``, ``W`` of ``[E, P, Q]``, ``ids`` of ``[T, 1]``, ``x`` a vector an
    item) as one kernel that reads item ``t``'s matrix ``W[ids[t]]`` in place.

    A mixture of experts exported with its experts batched (transformers'
    ``experts_implementation="batched_mm"``: GPT-OSS, Mixtral, OLMoE, Qwen3-MoE...) copies
    each routed token's expert matrices out of the weights (``gather_nd``: 256 tokens x 1 MB,
    256 MB a layer's projection, written and then read once) and multiplies each by the
    token's vector; both runtimes spent nine tenths of such a model's run there. Here each
    output row is the dot product of a row of the token's matrix with its vector, the kernel
    the dot-products rule schedules; ``matmul(x, W[ids])`` (a row vector times the matrix)
    reads ``W`` transposed, a constant laid out at compile time, so that its rows are the
    depth too. The id is taken modulo ``E`` in the kernel, as ``WrapIndices`` takes it for the
    gather: no id reads outside ``W``. GPT-OSS, Mixtral and Qwen2-MoE (width 256, four
    experts, two a token) took a quarter to a third of their time turn by turn, a quarter to a
    third of ONNX Runtime's (AMD EPYC Zen 4, two threads; ``benchmarks/models/paired_replay.py``).

    Notes
    -----
    Run after ``RealizeVDevice`` and before ``LegalizeOps``, on float tensors of static shapes
    whose product is on a CPU vdevice (none: the home vdevice's). The gather stays where
    anything else reads it (``DeadCodeElimination`` drops it where nothing does). Products of
    several columns a token, gathers of other forms (``batch_dims``, an index of more than
    one component), a vector broadcast over the items and weights that are not constants are
    left as they are.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with such products in place (``mod`` when there is none)."""
        return rewrite_calls(mod, _in_place) if IN_PLACE else mod


def _gathered(rewriter: PyExprMutator, expr: relax.Expr) -> tuple[np.ndarray, relax.Expr] | None:
    """``(W, ids)`` of an operand bound to ``gather_nd(W, ids)`` of a constant 3-D ``W`` by
    ``[T, 1]`` integer ids, else ``None``."""
    gather = bound_value(rewriter, expr)
    if not calls_op(gather, GATHER_OP) or int(gather.attrs.batch_dims) != 0:
        return None
    weights, ids = bound_value(rewriter, gather.args[0]), gather.args[1]
    if not isinstance(weights, Constant) or len(shape_of(ids) or []) != 2:
        return None
    if shape_of(ids)[1] != 1 or not str(ids.ty.dtype).startswith("int"):
        return None
    value = weights.value.numpy()
    return (value, ids) if value.ndim == 3 else None


def _in_place(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    if not calls_op(call, MATMUL_OP) or cpu_tensor_target(call.ty, rewriter.mod_) is None:
        return None
    a, b = call.args
    shapes = [shape_of(a), shape_of(b), shape_of(call)]
    dtypes = {str(a.ty.dtype), str(b.ty.dtype), str(call.ty.dtype)}
    if None in shapes or any(len(s) != 3 for s in shapes) or dtypes != {"float32"}:
        return None
    if len({s[0] for s in shapes}) != 1:  # a vector broadcast over the items: left
        return None
    left, right = _gathered(rewriter, a), _gathered(rewriter, b)
    if left is not None and shapes[1][2] == 1:  # W[ids[t]] @ x[t], x a column
        weights, ids = left
        vector = relax.op.squeeze(b, axis=[2])
    elif right is not None and shapes[0][1] == 1:  # x[t] @ W[ids[t]], x a row
        weights, ids = right
        weights = np.ascontiguousarray(weights.transpose(0, 2, 1))
        vector = relax.op.squeeze(a, axis=[1])
    else:
        return None
    rows = rewriter.builder_.call_te(
        _matvec, relax.const(weights), ids, rewriter.builder_.emit(vector),
        primfunc_name_hint=KERNEL, primfunc_attrs={OP_PATTERN_ATTR: OUT_ELEMWISE_FUSABLE},
    )  # fmt: skip
    return relax.op.reshape(rewriter.builder_.emit(rows), shapes[2])


def _matvec(weights: te.Tensor, ids: te.Tensor, vector: te.Tensor) -> te.Tensor:
    """``out[t, p] = sum_q weights[ids[t] mod E, p, q] * vector[t, q]``."""
    experts, rows, depth = weights.shape
    q = te.reduce_axis((0, depth), name="q")

    def row(t, p):
        expert = te.floormod(ids[t, 0], experts.astype(ids.dtype))
        return te.sum(weights[expert, p, q] * vector[t, q], axis=q)

    return te.compute((vector.shape[0], rows), row, name=KERNEL)
