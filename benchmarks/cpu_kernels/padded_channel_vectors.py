"""Convolutions a few columns short of the wide channel-vectorized tile with AVX-512: computed
at whole vectors of width (before) or a few columns wider with the channel tile
(``conv.channel_tile_width``, now), and ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/padded_channel_vectors.py [--threads 2] [--rounds 5]

SqueezeNet's 3x3 expand convolutions (13, 27 and 55 wide: 14, 28 and 56 now) and Inception
v3's 1x7 / 7x1 ones at 17 x 17 (21 now), each ``relu(conv2d)`` then its crop, as a build makes
them: ``width``, padded by ``PadConvolutionOutputs`` with the wide channel vectors off and the
rule's width-vectorized tile; ``channels``, computed ``channel_tile_width`` wide, its constant
weights packed by ``PackConstantWeights`` and the rule's channel-vectorized tile. Timed alone
(``time_evaluator``), ONNX Runtime on a one-node ONNX file of the same convolution, same
threads, in ``--rounds`` interleaved rounds (medians). On a host without AVX-512 nothing is
padded for the channel tile. Results: ``benchmarks/results/padded_channel_vectors.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from conv_kernel import fused_kernel  # noqa: E402
from wide_channel_vectors import width_against_channels  # noqa: E402

CASES = {  # name: (input, weights, stride, padding (rows, columns))
    "3x3 16 -> 64 @55": ((1, 16, 55, 55), (64, 16, 3, 3), 1, (1, 1)),
    "3x3 32 -> 128 @27": ((1, 32, 27, 27), (128, 32, 3, 3), 1, (1, 1)),
    "3x3 48 -> 192 @13": ((1, 48, 13, 13), (192, 48, 3, 3), 1, (1, 1)),
    "3x3 64 -> 256 @13": ((1, 64, 13, 13), (256, 64, 3, 3), 1, (1, 1)),
    "1x7 128 @17": ((1, 128, 17, 17), (128, 128, 1, 7), 1, (0, 3)),
    "7x1 128 -> 192 @17": ((1, 128, 17, 17), (192, 128, 7, 1), 1, (3, 0)),
    "1x7 192 @17": ((1, 192, 17, 17), (192, 192, 1, 7), 1, (0, 3)),
}


def cropped_func(x_shape, w_shape, stride: int, pad: tuple[int, int], wide: int):
    """The fused, legalized ``strided_slice(relu(conv2d))`` kernel computed ``wide`` columns
    wide and cropped back, unscheduled."""
    from tvm import relax

    rows, columns = pad
    width = (x_shape[3] + 2 * columns - w_shape[3]) // stride + 1
    padding = (rows, columns, rows, columns + stride * (wide - width))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.Var("w", relax.TensorType(w_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = relax.op.nn.relu(relax.op.nn.conv2d(x, w, strides=stride, padding=padding))
            out = bb.emit_output(relax.op.strided_slice(y, axes=[3], begin=[0], end=[width]))
        bb.emit_func_output(out)
    return fused_kernel(bb.get())


def channel_kernel(x_shape, w_shape, stride: int, pad: tuple[int, int], target):
    """The channel-vectorized kernel at ``channel_tile_width`` columns, or None where the
    width does not change or the weights are not packed by channel."""
    from tvm_hetero.passes.pack_constant_weights import packed_kernel
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules
    from tvm_hetero.schedules.cpu.common import vector_lanes
    from tvm_hetero.schedules.cpu.conv import channel_tile_width

    rows = (x_shape[2] + 2 * pad[0] - w_shape[2]) // stride + 1
    width = (x_shape[3] + 2 * pad[1] - w_shape[3]) // stride + 1
    lanes = vector_lanes(target, 32)
    wide = channel_tile_width(width, w_shape[0], lanes, x_shape[1], rows)
    if wide is None or wide == width:
        return None
    func = cropped_func(x_shape, w_shape, stride, pad, wide).with_attr("target", target)
    packing = packed_kernel(func)
    if packing is None or packing.suffix != "channels":
        return None
    return first_schedule(packing.kernel, target, cpu_rules())[0].mod["main"]


def main() -> None:
    width_against_channels(__doc__, "padded_channel_vectors.json", CASES, channel_kernel)


if __name__ == "__main__":
    main()
