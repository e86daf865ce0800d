"""ONNX ``DFT`` (opsets 17 and 20) for TVM 0.27's ONNX frontend, which has none.

``DFT`` transforms one signal axis of a real (last axis 1) or complex (last axis 2: real,
imaginary) tensor; FNet mixes its tokens with two of them (``torch.fft.fftn``), and audio
front ends take spectra. A transform of length ``L`` over a known axis is products with
constant ``cos`` and ``sin`` matrices: ``X[k] = sum_j x[j] exp(-+2 pi i j k / L)`` (forward,
inverse), so with ``C[j, k] = cos(2 pi j k / L)`` and ``S[j, k] = -+sin(2 pi j k / L)``,
``Re X = Re x @ C - Im x @ S`` and ``Im X = Im x @ C + Re x @ S`` (the inverse also scaled by
``1 / L``: :func:`dft_matrices`). ``dft_length`` beyond the
signal pads it with zeros (the matrices' rows stop at the signal), below it trims it;
``onesided`` keeps the first ``L // 2 + 1`` outputs. The products are plain matmuls, so the
matmul rule schedules them; ``O(L^2)`` work a transform, against an FFT's ``O(L log L)``: fine
for the lengths of a layer's tokens or channels. Refused, naming why
(``UnsupportedOperatorError`` at load): an axis, length or signal size not known when the model
is built, ``onesided`` with ``inverse``, an input whose last axis is not 1 or 2.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax.frontend.onnx import onnx_frontend


def dft_matrices(
    signal: int, length: int, outputs: int, inverse: bool, dtype: str
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``(C, S)``, each ``[min(signal, length), outputs]``: ``cos`` and the signed ``sin`` of
    ``2 pi j k / length`` (``-sin`` forward, ``+sin`` inverse), scaled by ``1 / length`` for
    the inverse: ``Re X = Re x @ C - Im x @ S`` and ``Im X = Im x @ C + Re x @ S``."""
    j = np.arange(min(signal, length))[:, None]
    k = np.arange(outputs)[None, :]
    angle = 2 * np.pi * ((j * k) % length) / length  # the product reduced: exact angles
    scale = 1.0 / length if inverse else 1.0
    sign = 1.0 if inverse else -1.0
    return (np.cos(angle) * scale).astype(dtype), (sign * np.sin(angle) * scale).astype(dtype)


def _refuse(what: str) -> tvm.error.OpAttributeUnImplemented:
    return tvm.error.OpAttributeUnImplemented(f"DFT: {what}")


def _constant_int(value, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, Constant):
        raise _refuse(f"{name} must be a constant")
    return int(value.value.numpy().reshape(-1)[0])


class DFT(onnx_frontend.OnnxOpConverter):
    """``DFT`` as products with constant ``cos`` / ``sin`` matrices (:func:`dft_matrices`)."""

    @classmethod
    def _impl_v17(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params):
        return cls._transform(bb, inputs, int(attr.get("axis", 1)), attr)

    @classmethod
    def _impl_v20(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params):
        axis = _constant_int(inputs[2] if len(inputs) > 2 else None, "axis")
        return cls._transform(bb, inputs, -2 if axis is None else axis, attr)

    @classmethod
    def _transform(cls, bb: relax.BlockBuilder, inputs: Sequence, axis: int, attr: dict):
        data = inputs[0]
        dims = data.ty.shape.values
        rank = len(dims)
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank - 1:
            raise _refuse(f"axis {axis} is not a signal axis of a rank-{rank} input")
        parts, signal = dims[-1], dims[axis]
        if not isinstance(parts, tvm.tirx.IntImm) or int(parts) not in (1, 2):
            raise _refuse("the input's last axis must be 1 (real) or 2 (complex)")
        if not isinstance(signal, tvm.tirx.IntImm):
            raise _refuse("the signal's length must be known")
        signal = int(signal)
        given = _constant_int(inputs[1] if len(inputs) > 1 else None, "dft_length")
        length = signal if given is None else given
        inverse, onesided = bool(attr.get("inverse", 0)), bool(attr.get("onesided", 0))
        if inverse and onesided:
            raise _refuse("onesided with inverse")
        outputs = length // 2 + 1 if onesided else length
        dtype = str(data.ty.dtype)
        cos, sin = (relax.const(m) for m in dft_matrices(signal, length, outputs, inverse, dtype))

        order = [a for a in range(rank - 1) if a != axis] + [axis]  # the signal last
        back = [order.index(a) for a in range(rank - 1)]

        def part(index: int) -> relax.Expr:
            x = bb.emit(relax.op.take(data, relax.const(index, "int64"), axis=rank - 1))
            x = bb.emit(relax.op.permute_dims(x, order))
            if signal > length:
                x = bb.emit(relax.op.strided_slice(x, [rank - 2], [0], [length]))
            return x

        real = part(0)
        re = bb.emit(relax.op.matmul(real, cos))
        im = bb.emit(relax.op.matmul(real, sin))
        if int(parts) == 2:
            imag = part(1)
            re = bb.emit(relax.op.subtract(re, relax.op.matmul(imag, sin)))
            im = bb.emit(relax.op.add(im, relax.op.matmul(imag, cos)))
        re, im = (bb.emit(relax.op.permute_dims(p, back)) for p in (re, im))
        return relax.op.stack([re, im], axis=rank - 1)


CONVERTERS = {"DFT": DFT}
