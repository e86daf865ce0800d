"""ONNX ``ConstantOfShape`` with an empty shape, which TVM 0.27's ONNX frontend fails on.

An empty ``shape`` input (a tensor of shape ``[0]``) asks for a scalar filled with ``value``.
The frontend kept ``value`` as the node's one-element tensor (rank 1) and broadcast it to the
empty shape, which Relax refuses (a rank-1 tensor broadcast to rank 0: Longformer's attention
masks export one). Here that case is a scalar constant of ``value``'s type (``float32`` zero
without one); every other shape is left to the frontend's own converter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.frontend.onnx import onnx_frontend


class ConstantOfShape(onnx_frontend.ConstantOfShape):
    """The frontend's converter, but for an empty shape: a scalar."""

    @classmethod
    def _impl_v9(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params):
        shape = inputs[0]
        if isinstance(shape, Constant) and shape.value.numpy().size == 0:
            given = attr.get("value")
            value = np.zeros(1, "float32") if given is None else onnx_frontend.get_numpy(given)
            value = np.asarray(value)
            return relax.const(value.reshape(-1)[0], str(value.dtype))
        return super()._impl_v9(bb, inputs, attr, params)


CONVERTERS = {"ConstantOfShape": ConstantOfShape}
