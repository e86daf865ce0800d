"""Analytic FLOP counts of Relax operators (multiply-add = 2 FLOPs)."""

from __future__ import annotations

import math
from collections.abc import Sequence

# FLOPs per output element of element-wise and activation operators; unlisted ops count 1.
_PER_ELEMENT = {
    "relax.nn.gelu": 8,
    "relax.nn.gelu_tanh": 8,
    "relax.nn.silu": 4,
    "relax.sigmoid": 4,
    "relax.tanh": 4,
    "relax.exp": 4,
    "relax.erf": 4,
}
# FLOPs per input element of normalisations and reductions.
_PER_INPUT = {
    "relax.nn.softmax": 5,
    "relax.nn.log_softmax": 5,
    "relax.nn.layer_norm": 8,
    "relax.nn.group_norm": 8,
    "relax.nn.rms_norm": 5,
    "relax.nn.batch_norm": 4,
    "relax.mean": 1,
    "relax.sum": 1,
    "relax.max": 1,
    "relax.min": 1,
    "relax.variance": 3,
}
# Data movement only.
_ZERO = {
    "relax.reshape",
    "relax.permute_dims",
    "relax.split",
    "relax.concat",
    "relax.to_vdevice",
    "relax.hint_on_device",
    "relax.strided_slice",
    "relax.take",
    "relax.squeeze",
    "relax.expand_dims",
    "relax.broadcast_to",
    "relax.flatten",
    "relax.astype",
    "relax.zeros",
    "relax.ones",
    "relax.full",
    "relax.full_like",
    "relax.zeros_like",
    "relax.ones_like",
    "relax.nn.dropout",
    "relax.layout_transform",
    "relax.tile",
    "relax.repeat",
}

Shape = Sequence[int]


def matmul_flops(a: Shape, b: Shape) -> int:
    """FLOPs of ``relax.matmul`` with numpy broadcasting: ``2 * batch * M * N * K``."""
    a2 = [1, *a] if len(a) == 1 else list(a)
    b2 = [*b, 1] if len(b) == 1 else list(b)
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch = _broadcast(a2[:-2], b2[:-2])
    return 2 * math.prod(batch) * m * n * k


def conv_flops(out: Shape, weight: Shape) -> int:
    """FLOPs of a convolution: ``2 * prod(out) * (C_in / groups) * prod(kernel)``, any group count.

    Layouts are the Relax defaults (``NCHW`` / ``OIHW``): ``weight[1]`` is ``C_in / groups``.
    """
    return 2 * math.prod(out) * math.prod(weight[1:])


def op_flops(
    op: str, inputs: Sequence[Shape], output: Shape | None, attrs: dict | None = None
) -> int:
    """FLOPs of one Relax operator from its static shapes.

    Parameters
    ----------
    op : str
        Relax op name (``relax.matmul``).
    inputs : Sequence[Sequence[int]]
        Static shapes of the tensor inputs, in argument order.
    output : Sequence[int] or None
        Static shape of the (first) output tensor.
    attrs : dict, optional
        Op attributes (``pool_size`` for pooling).
    """
    attrs = attrs or {}
    if op in _ZERO:
        return 0
    if op == "relax.matmul":
        return matmul_flops(inputs[0], inputs[1])
    if op in ("relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv3d") and output is not None:
        return conv_flops(output, inputs[1])
    if op in _PER_INPUT and inputs:
        return _PER_INPUT[op] * math.prod(inputs[0])
    if op in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d") and output is not None:
        pool = attrs.get("pool_size", (1, 1))
        return math.prod(output) * math.prod(int(p) for p in pool)
    if output is None:
        return 0
    return _PER_ELEMENT.get(op, 1) * math.prod(output)


def _broadcast(a: Sequence[int], b: Sequence[int]) -> list[int]:
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + list(a)
    b = [1] * (n - len(b)) + list(b)
    return [max(x, y) for x, y in zip(a, b, strict=True)]
