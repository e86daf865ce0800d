"""ONNX ``Split`` by sizes known only at run time, which TVM 0.27's ONNX frontend refuses.

A mixture of experts routes each token to its experts and cuts the routed rows into one run an
expert, by the counts of a reduction over the routing (transformers' JetMoE: ``Split`` of the
tokens by sizes computed from the router's top-k). The frontend converts a ``split`` input that
is a constant and fails on any other ("Dynamic Split not yet supported"). Here the sizes, a
1-D tensor of as many elements as the node has outputs, become the symbolic dimensions of a
shape (``tensor_to_shape``) and each output a slice between their running sums (Relax's
``split`` takes constant indices only), its size a symbolic dimension, the last one's the
axis's extent less the others' (ONNX's sizes add up to it: the pieces concatenated again have
the input's extent, not a sum Relax cannot prove equal to it); a constant ``split``, or
none, is left to the frontend's own converter. What follows such a split sees symbolic sizes
where the frontend expected numbers: ``Expand`` of data with a symbolic dimension to a
constant shape (the frontend read every dimension's value, and compared symbolic ones as if
numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tvm import relax, tirx
from tvm.ir.expr import Constant
from tvm.relax.frontend.onnx import onnx_frontend


class Split(onnx_frontend.Split):
    """The frontend's converter, but for sizes computed by the graph: symbolic indices."""

    @classmethod
    def _impl_v13(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params: Any):
        sizes = inputs[1] if len(inputs) > 1 else None
        if sizes is not None:
            sizes = onnx_frontend.get_constant(sizes, params)
        if sizes is None or isinstance(sizes, Constant) or sizes.ty.ndim != 1:
            return super()._impl_v13(bb, inputs, attr, params)
        count = sizes.ty.shape[0] if sizes.ty.shape is not None else None
        if not isinstance(count, tirx.IntImm):
            raise ValueError("Split: sizes of an unknown count are not supported")
        if sizes.ty.dtype != "int64":
            sizes = bb.normalize(relax.op.astype(sizes, "int64"))
        dims = [tirx.Var(f"split_{k}", "int64") for k in range(int(count))]
        shape = bb.emit(relax.op.tensor_to_shape(sizes))
        bb.match_cast(shape, relax.ShapeType(dims))
        axis = attr.get("axis", 0)
        extent = inputs[0].ty.shape.values[axis]  # the sizes add up to it: the last ends there
        ends = [sum(dims[: k + 1], tirx.IntImm("int64", 0)) for k in range(len(dims) - 1)]
        pieces, start = [], tirx.IntImm("int64", 0)
        for end in [*ends, extent]:  # relax's split takes constant indices only: a slice each
            piece = relax.op.strided_slice(inputs[0], [axis], [start], [end], assume_inbound=True)
            pieces.append(bb.normalize(piece))
            start = end
        return relax.Tuple(pieces)


class Expand(onnx_frontend.Expand):
    """The frontend's converter, but for data of a symbolic shape expanded to a constant one:
    each dimension the target's, the data's where the target's is 1 (a symbolic dimension is
    taken to broadcast, as the graph's own shapes promise)."""

    @classmethod
    def _impl_v13(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params: Any):
        data, shape = inputs[0], inputs[1]
        dims = list(data.ty.shape.values) if isinstance(data.ty, relax.TensorType) else None
        if (
            not isinstance(shape, Constant)
            or dims is None
            or all(isinstance(d, tirx.IntImm) for d in dims)
        ):
            return super()._impl_v13(bb, inputs, attr, params)
        target = [int(d) for d in shape.value.numpy().tolist()]
        rank = max(len(target), len(dims))
        target = [1] * (rank - len(target)) + target
        dims = [tirx.IntImm("int64", 1)] * (rank - len(dims)) + dims
        out = [d if t == 1 else tirx.IntImm("int64", t) for t, d in zip(target, dims, strict=True)]
        return relax.op.broadcast_to(data, relax.ShapeExpr(out))


CONVERTERS = {"Split": Split, "Expand": Expand}
