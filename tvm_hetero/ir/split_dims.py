"""The dimensions along which a Relax operator splits exactly into shards (EOP's Table 2).

A :class:`SplitDim` says which output axis is cut, which axis of each argument is cut with it (or
that the argument goes whole to every shard), and, for a convolution's rows, the window that makes
neighbouring input shards overlap (the halo). The planner reads extents and byte counts from it;
the realizing pass reads the axes. Read-only analysis of static-shaped calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tvm import relax

from tvm_hetero._compat import TensorType
from tvm_hetero.ir.types import itemsize

ELEMENTWISE = frozenset(
    f"relax.{name}"
    for name in (
        "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "negative",
        "exp", "log", "sqrt", "rsqrt", "erf", "tanh", "sigmoid", "clip", "nn.relu", "nn.gelu",
        "nn.gelu_tanh", "nn.silu",
    )
)  # fmt: skip
"""Operators computed element by element (with numpy broadcasting): exact along any axis."""


@dataclass(frozen=True)
class Window:
    """A sliding window along the cut axis: output row ``o`` reads input rows
    ``o * stride - pad_before .. o * stride - pad_before + extent - 1``."""

    stride: int
    extent: int
    pad_before: int
    in_extent: int

    def input_rows(self, lo: int, hi: int) -> tuple[int, int, int, int]:
        """Input rows ``[start, stop)`` and the padding ``(before, after)`` output rows
        ``[lo, hi)`` need."""
        first = lo * self.stride - self.pad_before
        last = (hi - 1) * self.stride - self.pad_before + self.extent
        start, stop = max(first, 0), min(last, self.in_extent)
        return start, stop, start - first, last - stop


@dataclass(frozen=True)
class SplitDim:
    """One way to cut an operator into consecutive shards.

    Attributes
    ----------
    name : str
        ``batch``, ``M`` / ``N`` (a matmul's rows / columns, EOP's HW1W2), ``H`` (convolution rows,
        with halo), ``OC`` (output channels) or ``axisK`` (element-wise and layout ops).
    extent : int
        Units along the cut output axis.
    out_axis : int
        The output axis cut (non-negative).
    in_axes : tuple[int | None, ...]
        Per call argument: the axis cut with the output, or ``None`` when every shard reads it all.
    window : Window or None
        Set when input shards overlap (convolution rows).
    """

    name: str
    extent: int
    out_axis: int
    in_axes: tuple[int | None, ...]
    window: Window | None = None

    def input_slice(self, arg: int, lo: int, hi: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of argument ``arg`` that output units ``[lo, hi)`` read."""
        if self.window is not None:
            return self.window.input_rows(lo, hi)[:2]
        return lo, hi


def devices_used(shares: Sequence[int]) -> int:
    """How many vdevices a share list reaches: the last non-zero share's index + 1 (1 if none)."""
    return max((i + 1 for i, n in enumerate(shares) if n), default=1)


def shape_of(expr: relax.Expr) -> list[int] | None:
    """Static shape of a tensor-typed expression (an argument or the call itself), else ``None``."""
    ty = expr.ty
    if not isinstance(ty, TensorType) or ty.shape is None:
        return None
    try:
        return [int(v) for v in ty.shape.values]
    except TypeError:  # symbolic
        return None


def _nbytes(expr: relax.Expr) -> int:
    return math.prod(shape_of(expr) or []) * itemsize(str(expr.ty.dtype))


def split_dims(call: relax.Call) -> dict[str, SplitDim]:
    """Every exact cut of ``call`` with at least 2 units (empty when none is known)."""
    out, ins = shape_of(call), [shape_of(a) for a in call.args]
    if out is None or any(s is None for s in ins):
        return {}
    dims = _dims(getattr(call.op, "name", ""), call, out, ins)
    return {d.name: d for d in dims if d.extent >= 2}


def _dims(name: str, call: relax.Call, out: list[int], ins: list[list[int]]) -> list[SplitDim]:
    rank = len(out)
    if name == "relax.matmul":
        x, w = ins
        dims = []
        if len(x) >= 2:
            dims.append(SplitDim("M", out[-2], rank - 2, (len(x) - 2, None)))
        if len(w) >= 2:
            dims.append(SplitDim("N", out[-1], rank - 1, (None, len(w) - 1)))
        if rank > 2:
            axes = tuple(0 if len(s) == rank and s[0] == out[0] else None for s in ins)
            dims.append(SplitDim("batch", out[0], 0, axes))
        return dims
    if name == "relax.nn.conv2d":
        return _conv2d_dims(call, out, ins)
    if name in ELEMENTWISE:
        return [SplitDim(f"axis{a}", out[a], a, _broadcast_axes(ins, out, a)) for a in range(rank)]
    if name == "relax.permute_dims":
        axes = call.attrs.axes
        perm = list(range(rank))[::-1] if axes is None else [int(v) for v in axes]
        return [SplitDim(f"axis{a}", out[a], a, (perm[a],)) for a in range(rank)]
    if name in ("relax.nn.softmax", "relax.nn.log_softmax"):
        reduced = int(call.attrs.axis) % rank
        return [SplitDim(f"axis{a}", out[a], a, (a,)) for a in range(rank) if a != reduced]
    if name == "relax.nn.layer_norm":
        reduced = {int(v) % rank for v in call.attrs.axes}
        return [
            SplitDim(f"axis{a}", out[a], a, (a, None, None))
            for a in range(rank)
            if a not in reduced
        ]
    return []


def _broadcast_axes(ins: list[list[int]], out: list[int], axis: int) -> tuple[int | None, ...]:
    """Per input: the axis aligned with output ``axis`` (numpy broadcasting), or ``None``."""
    axes = []
    for shape in ins:
        aligned = axis - (len(out) - len(shape))
        full = aligned >= 0 and shape[aligned] == out[axis]
        axes.append(aligned if full else None)
    return tuple(axes)


def _conv2d_dims(call: relax.Call, out: list[int], ins: list[list[int]]) -> list[SplitDim]:
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts != ("NCHW", "OIHW", "NCHW"):
        return []
    x, w = ins
    stride, dilation = int(attrs.strides[0]), int(attrs.dilation[0])
    window = Window(stride, (w[2] - 1) * dilation + 1, int(attrs.padding[0]), x[2])
    dims = [
        SplitDim("batch", out[0], 0, (0, None)),
        SplitDim("H", out[2], 2, (2, None), window),
    ]
    if int(attrs.groups) == 1:
        dims.append(SplitDim("OC", out[1], 1, (None, 0)))
    return dims


@dataclass(frozen=True)
class Traffic:
    """Bytes a cut moves, for the planner's communication cost.

    Attributes
    ----------
    cut_in_bytes : int
        Bytes of the arguments that are cut (their shards scale with the share).
    whole_in_bytes : int
        Bytes of the arguments every shard reads whole (copied to each other device in full).
    out_bytes : int
        Bytes of the output.
    """

    cut_in_bytes: int
    whole_in_bytes: int
    out_bytes: int


def traffic(call: relax.Call, dim: SplitDim) -> Traffic:
    """The byte counts of cutting ``call`` along ``dim``."""
    cut = sum(_nbytes(a) for a, ax in zip(call.args, dim.in_axes, strict=True) if ax is not None)
    whole = sum(_nbytes(a) for a, ax in zip(call.args, dim.in_axes, strict=True) if ax is None)
    return Traffic(cut, whole, _nbytes(call))
