"""ONNX ``TopK`` with ``sorted=0``, which TVM 0.27's ONNX frontend refuses.

ONNX leaves the order of an unsorted ``TopK``'s results undefined, so the sorted order is one
it allows: here ``sorted=0`` is converted as ``sorted=1`` (transformers' DeepSeek-V3 picks its
experts' groups so; what reads them sums over the picks, in whatever order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend


class TopK(onnx_frontend.TopK):
    """The frontend's converter, the results of an unsorted one sorted."""

    @classmethod
    def _impl_v11(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params: Any):
        return super()._impl_v11(bb, inputs, {**attr, "sorted": 1}, params)


CONVERTERS = {"TopK": TopK}
