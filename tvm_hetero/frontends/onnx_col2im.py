"""ONNX ``Col2Im`` (opset 18) for TVM 0.27's ONNX frontend, which has none.

``Col2Im`` sums sliding blocks of columns back into an image (``torch.nn.Fold``; VOLO's
outlooker attention exports one). Each input channel ``c * K + k`` (``K = kh * kw`` window
positions, ``k = i * kw + j``) holds, for every block, the value that lands at window position
``(i, j)`` of image channel ``c``: a transposed convolution of ``C`` groups whose kernel is one
at ``(i, j)`` and zero elsewhere does exactly that sum, with the node's strides, dilations and
pads, its output padding chosen so that the output is ``image_shape``. Two spatial axes only
(the node's ``image_shape`` and ``block_shape`` constants of length 2); others are refused
naming the node (``UnsupportedOperatorError`` at load).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.frontend.onnx import onnx_frontend


def one_hot_kernels(channels: int, block: Sequence[int], dtype: str) -> np.ndarray:
    """``[channels * kh * kw, 1, kh, kw]`` (``IOHW``, one output channel a group): input channel
    ``c * kh * kw + i * kw + j`` is one at ``(i, j)``."""
    kh, kw = block
    weights = np.zeros((channels, kh * kw, 1, kh, kw), dtype=dtype)
    for k in range(kh * kw):
        weights[:, k, 0, k // kw, k % kw] = 1
    return weights.reshape(channels * kh * kw, 1, kh, kw)


def _constant(value: relax.Expr, name: str) -> list[int]:
    if not isinstance(value, Constant):
        raise tvm.error.OpAttributeUnImplemented(f"Col2Im: {name} must be a constant")
    return [int(v) for v in value.value.numpy().reshape(-1)]


class Col2Im(onnx_frontend.OnnxOpConverter):
    """``Col2Im`` as a grouped ``conv2d_transpose`` with one-hot kernels."""

    @classmethod
    def _impl_v18(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params) -> relax.Expr:
        data = inputs[0]
        image, block = _constant(inputs[1], "image_shape"), _constant(inputs[2], "block_shape")
        if len(image) != 2 or len(block) != 2:
            raise tvm.error.OpAttributeUnImplemented(
                f"Col2Im over {len(image)} spatial axes: only 2 are supported"
            )
        strides = [int(s) for s in attr.get("strides", [1, 1])]
        dilations = [int(d) for d in attr.get("dilations", [1, 1])]
        pads = [int(p) for p in attr.get("pads", [0, 0, 0, 0])]  # top, left, bottom, right
        batch, depth, _ = data.ty.shape.values  # the batch may be symbolic
        if not isinstance(depth, tvm.tirx.IntImm):
            raise tvm.error.OpAttributeUnImplemented("Col2Im: the input's channels must be known")
        depth = int(depth)
        window = block[0] * block[1]
        if depth % window:
            raise tvm.error.OpAttributeUnImplemented(
                f"Col2Im: {depth} input channels are not a multiple of the block's {window}"
            )
        channels = depth // window
        blocks = [
            (image[a] + pads[a] + pads[a + 2] - dilations[a] * (block[a] - 1) - 1) // strides[a] + 1
            for a in range(2)
        ]
        reach = [
            (blocks[a] - 1) * strides[a] - pads[a] - pads[a + 2] + dilations[a] * (block[a] - 1) + 1
            for a in range(2)
        ]
        columns = bb.emit(relax.op.reshape(data, [batch, depth, *blocks]))
        kernels = relax.const(one_hot_kernels(channels, block, str(data.ty.dtype)))
        return relax.op.nn.conv2d_transpose(
            columns, kernels, strides=strides, padding=pads,
            output_padding=[image[a] - reach[a] for a in range(2)], dilation=dilations,
            groups=channels,
        )  # fmt: skip


CONVERTERS = {"Col2Im": Col2Im}
