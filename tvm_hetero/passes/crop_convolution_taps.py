"""CropConvolutionTaps: the taps of a convolution that read only its padding are dropped."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.ir.expr import Constant
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.ir.types import static_shape

CONV2D_OP = "relax.nn.conv2d"


@tvm.transform.module_pass(opt_level=0, name="CropConvolutionTaps")
class CropConvolutionTaps:
    """Crop each NCHW / OIHW ``conv2d``'s window to the taps that read the input somewhere.

    A tap ``k`` of an axis reads input ``o * stride + k * dilation - pad`` for output ``o``;
    where that is outside ``[0, size)`` for every output, the tap multiplies padding (zeros)
    only. Atrous pyramids dilate 3 x 3 windows beyond the map: DeepLabV3's rates 12, 24 and 36
    over MobileNetV3's 14 x 14 features (torchvision), where at 24 and 36 every tap but the
    centre reads padding alone: they are 1x1 convolutions. Each such convolution is a 3 x 3 one
    here, over an input padded to 62 x 62 and 86 x 86 (38 and 68 ms in that model against ONNX
    Runtime's under 1, which skips padding), and becomes a 1x1 over the map itself. The taps
    that remain are a contiguous range on each axis; the weights keep those (a constant sliced
    here, otherwise a ``strided_slice``), the padding before drops by the taps cut times the
    dilation, the padding after is what keeps the output's size. Numbers are unchanged (the
    taps cut added zeros). Static shapes only.

    Notes
    -----
    Applied at load (:func:`~tvm_hetero.frontends.load.from_irmodule`), with
    :class:`~tvm_hetero.passes.EmptyTensorsAsConstants`: every strategy and the profiler see
    the convolution as it computes.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with the windows cropped (``mod`` when none needs it)."""
        return rewrite_calls(mod, _cropped)


def tap_outputs(size: int, outputs: int, window: int, stride: int, dilation: int,
                before: int) -> list[tuple[int, int]]:  # fmt: skip
    """For each tap of one axis, ``(first, end)``: the outputs whose read of that tap lands in
    the input (``end <= first``: none). Tap ``k`` reads ``o * stride + k * dilation -
    before``."""
    spans = []
    for k in range(window):
        offset = k * dilation - before
        first = -(offset // stride) if offset < 0 else 0  # least o with o * stride + offset >= 0
        end = min(outputs, (size - 1 - offset) // stride + 1) if size - 1 - offset >= 0 else 0
        spans.append((first, max(first, end)))
    return spans


def reaching_taps(size: int, outputs: int, window: int, stride: int, dilation: int,
                  before: int) -> tuple[int, int]:  # fmt: skip
    """``(first, last)``: the taps of one axis that read the input for some output
    (:func:`tap_outputs`; ``last < first``: none)."""
    spans = tap_outputs(size, outputs, window, stride, dilation, before)
    reach = [k for k, (first, end) in enumerate(spans) if end > first]
    return (reach[0], reach[-1]) if reach else (1, 0)


def window_weights(weight: relax.Expr, rows: tuple[int, int], cols: tuple[int, int]):
    """The taps ``rows[0]:rows[1]`` x ``cols[0]:cols[1]`` of OIHW weights: a constant sliced
    here, anything else by a ``strided_slice``."""
    if isinstance(weight, Constant):
        kept = weight.value.numpy()[:, :, rows[0] : rows[1], cols[0] : cols[1]]
        return relax.const(np.ascontiguousarray(kept), str(weight.ty.dtype))
    return relax.op.strided_slice(weight, [2, 3], [rows[0], cols[0]], [rows[1], cols[1]])


@dataclass(frozen=True)
class Window:
    """An NCHW / OIHW ``conv2d``'s two spatial axes, each ``(height, width)``: the input's
    sizes, the window, strides, dilations, padding before and after, and the outputs."""

    sizes: tuple[int, int]
    windows: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    befores: tuple[int, int]
    afters: tuple[int, int]
    outputs: tuple[int, int]

    def axis(self, i: int) -> tuple[int, int, int, int, int, int]:
        """``(size, outputs, window, stride, dilation, before)`` of axis ``i``: the arguments of
        :func:`reaching_taps` and its kin."""
        return (self.sizes[i], self.outputs[i], self.windows[i], self.strides[i],
                self.dilations[i], self.befores[i])  # fmt: skip


def window_of(call: relax.Call) -> Window | None:
    """The :class:`Window` of ``call`` where it is an NCHW / OIHW ``conv2d`` of static shapes,
    else None."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == CONV2D_OP):
        return None
    a = call.attrs
    if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW":
        return None
    dims = [static_shape(arg.ty) for arg in call.args]
    if any(d is None or len(d) != 4 for d in dims):
        return None
    (_, _, height, width), (_, _, kh, kw) = dims
    top, left, bottom, right = (int(p) for p in a.padding)
    sizes, windows, befores, afters = (height, width), (kh, kw), (top, left), (bottom, right)
    strides = tuple(int(v) for v in a.strides)
    dilations = tuple(int(v) for v in a.dilation)
    outputs = tuple(
        (sizes[i] + befores[i] + afters[i] - dilations[i] * (windows[i] - 1) - 1) // strides[i] + 1
        for i in range(2)
    )
    return Window(sizes, windows, strides, dilations, befores, afters, outputs)


def _cropped(_rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    w = window_of(call)
    if w is None:
        return None
    a = call.attrs
    data, weight = call.args
    sizes, windows, strides, dilations = w.sizes, w.windows, w.strides, w.dilations
    befores, outputs = w.befores, w.outputs
    taps = [reaching_taps(*w.axis(i)) for i in range(2)]
    if any(last < first for first, last in taps):
        return None  # every tap reads padding alone: a zero output, left to the kernels
    if all((first, last) == (0, windows[i] - 1) for i, (first, last) in enumerate(taps)):
        return None
    new_before = [befores[i] - taps[i][0] * dilations[i] for i in range(2)]
    new_window = [last - first + 1 for first, last in taps]
    new_after = [
        (outputs[i] - 1) * strides[i] + dilations[i] * (new_window[i] - 1) + 1 - sizes[i]
        - new_before[i]
        for i in range(2)
    ]  # fmt: skip
    if min(new_before + new_after) < 0:
        return None  # the output would need the input cropped: left as it is
    (h0, h1), (w0, w1) = taps
    weight = window_weights(weight, (h0, h1 + 1), (w0, w1 + 1))
    return relax.op.nn.conv2d(
        data, weight, a.strides, [new_before[0], new_before[1], new_after[0], new_after[1]],
        a.dilation, int(a.groups), a.data_layout, a.kernel_layout, a.out_layout,
        a.out_dtype or None,
    )  # fmt: skip
