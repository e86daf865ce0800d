"""ConvolutionTapsByRegion: a dilated convolution whose taps mostly read padding, computed tap
by tap over the outputs each tap reaches the input from."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.ir import IRModule
from tvm.relax.expr_functor import PyExprMutator

from tvm_hetero.ir.mutate import rewrite_calls
from tvm_hetero.passes.crop_convolution_taps import tap_outputs, window_of, window_weights

MOST_REACHED = 0.5
"""The largest share of (tap, output) pairs that read the input, over all of them, for which a
convolution is computed tap by tap (beyond it, the padded convolution does less work twice)."""

MOST_TAPS = 25
"""The most taps a window may have to be computed tap by tap (a 5 x 5 window)."""


@tvm.transform.module_pass(opt_level=0, name="ConvolutionTapsByRegion")
class ConvolutionTapsByRegion:
    """Compute an NCHW / OIHW ``conv2d`` whose taps read the input for at most
    :data:`MOST_REACHED` of (tap, output) pairs as a sum over its taps: each tap a 1x1
    convolution (its slice of the weights) over the block of outputs it reads the input for,
    from the input's block those outputs read, padded back to the whole output.

    Atrous convolutions over maps not much larger than their rate read padding for most
    outputs: DeepLabV3's rate 12 over MobileNetV3's 14 x 14 features (torchvision) reaches the
    map with its centre tap everywhere but with the others only from the two rows or columns
    at the far edge, 324 of its 1,764 (tap, output) pairs. Computed whole, over an input
    padded to 38 x 38, it took 15 ms (ONNX Runtime, which skips the padding: under 1); tap by
    tap it multiplies only what reaches the input. The taps whose outputs are all of them are
    not padded; numbers are the convolution's (the same products, summed in another order).
    Windows cropped first (:class:`~tvm_hetero.passes.CropConvolutionTaps`), static shapes,
    dilated windows of at most :data:`MOST_TAPS` taps (an undilated 3 x 3 window over a 2 x 2
    map reaches the input for under half its pairs too, but there nine small kernels would
    cost more than the one).

    Notes
    -----
    Applied at load (:func:`~tvm_hetero.frontends.load.from_irmodule`), after
    :class:`~tvm_hetero.passes.CropConvolutionTaps`.
    """

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a new module with such convolutions tap by tap (``mod`` when none is)."""
        return rewrite_calls(mod, _by_region)


def _by_region(rewriter: PyExprMutator, call: relax.Call) -> relax.Expr | None:
    w = window_of(call)
    if w is None or not 2 <= w.windows[0] * w.windows[1] <= MOST_TAPS or max(w.dilations) < 2:
        return None  # an undilated window over a small map: one kernel beats nine small ones
    a = call.attrs
    data, weight = call.args
    (height, width), (kh, kw), strides, dilations = w.sizes, w.windows, w.strides, w.dilations
    (top, left), outputs = w.befores, w.outputs
    spans = [tap_outputs(*w.axis(i)) for i in range(2)]
    reached = sum(e - f for f, e in spans[0]) * sum(e - f for f, e in spans[1])
    if reached > MOST_REACHED * kh * kw * outputs[0] * outputs[1]:
        return None
    emit = rewriter.builder_.emit
    total = None
    for (i, (r0, r1)), (j, (c0, c1)) in ((r, c) for r in enumerate(spans[0])
                                          for c in enumerate(spans[1])):  # fmt: skip
        if r1 <= r0 or c1 <= c0:
            continue
        rows = [
            r0 * strides[0] + i * dilations[0] - top,
            (r1 - 1) * strides[0] + i * dilations[0] - top,
        ]
        cols = [
            c0 * strides[1] + j * dilations[1] - left,
            (c1 - 1) * strides[1] + j * dilations[1] - left,
        ]
        whole = rows == [0, height - 1] and cols == [0, width - 1] and strides == (1, 1)
        block = data if whole else emit(relax.op.strided_slice(
            data, [2, 3], [rows[0], cols[0]], [rows[1] + 1, cols[1] + 1], strides,
        ))  # fmt: skip
        tap = window_weights(weight, (i, i + 1), (j, j + 1))
        part = emit(relax.op.nn.conv2d(block, tap, groups=int(a.groups),
                                       out_dtype=a.out_dtype or None))  # fmt: skip
        pads = [r0, outputs[0] - r1, c0, outputs[1] - c1]
        if any(pads):
            part = emit(relax.op.nn.pad(part, [0, 0, 0, 0, pads[0], pads[1], pads[2], pads[3]]))
        total = part if total is None else emit(relax.op.add(total, part))
    return total
