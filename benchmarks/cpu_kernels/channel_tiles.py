"""Channel-vectorized convolution tiles of two vectors of output channels against one, beside
ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/channel_tiles.py [--runs 30] [--only CASE ...]

With AVX-512 the convolution rule's channel-vectorized tile (up to 7 output positions, each a
vector of 16 output channels) now computes two vectors of channels at each position where 32
divide the channels (``conv.WIDE_CHANNEL_TILE_VECTORS``), so each broadcast input element feeds
two multiply-adds; ``before`` is one vector. The cases are ResNet's 3x3 convolutions that take
the channel tile (the strided ones, and the one over 7 x 7), a narrow map as a FlexPie tile
cut by columns makes it, SqueezeNet's 3x3 over 13 x 13 (computed 14 wide), and ResNet's
stride-1 3x3 over 14 x 14 and 28 x 28 as controls (Winograd takes them). Each case is a
``Conv2d`` with ReLU after it exported to ONNX (batch 1), compiled for the whole CPU with the
change and without it, run end to end by our executor beside ONNX Runtime on the same cores
and threads in interleaved rounds (medians); outputs checked against ONNX Runtime's. On a host
without AVX-512 both builds are the same. Results: ``benchmarks/results/channel_tiles.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import convolution_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, kernel, stride, input height, width)
    "3x3/2 128 @56": (128, 128, 3, 2, 56, 56),
    "3x3/2 256 @28": (256, 256, 3, 2, 28, 28),
    "3x3/2 512 @14": (512, 512, 3, 2, 14, 14),
    "3x3 512 @7": (512, 512, 3, 1, 7, 7),
    "3x3 256 @14x3": (256, 256, 3, 1, 14, 3),
    "3x3 64->256 @13": (64, 256, 3, 1, 13, 13),
    "3x3 256 @14": (256, 256, 3, 1, 14, 14),
    "3x3 128 @28": (128, 128, 3, 1, 28, 28),
}  # fmt: skip


def main() -> int:
    return convolution_case_command(
        __doc__, CASES, ("WIDE_CHANNEL_TILE_VECTORS", 1), "channel_tiles.jsonl"
    )


if __name__ == "__main__":
    sys.exit(main())
