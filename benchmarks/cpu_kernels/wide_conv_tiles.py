"""Convolutions over wide maps in tiles of 8 output channels x 2 vectors with AVX-512, or of 4 x 2
as before, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/wide_conv_tiles.py [--runs 30] [--only CASE ...]

The convolution rule's width-vectorized tile (rows wider than the channel-vectorized tile
takes: stems, 112- to 224-wide maps) computed 4 output channels x 2 vectors of a row: 8
accumulators of AVX2's 16 registers. With AVX-512's 32 it now computes 8 x 2
(``conv.WIDE_TILE_CHANNELS_AVX512``): 16 accumulators fed by 8 broadcast weights and 2 input
vectors. Cases: the stems and wide layers of Inception v3, VGG, ResNet and ResNet-D; the
MobileNet stem (stride 2 over 3 channels, read lane by lane: one vector a tile either way) is
a control. Whether a 3x3 of stride 1 runs as Winograd's is measured once per shape with the
new tile (``build.conv_choices``); where Winograd's wins, both builds run it. Each case a
convolution with ReLU after it, exported to ONNX (batch 1), compiled for the whole CPU with the
change and without it, run end to end by our executor beside ONNX Runtime on the same cores
and threads in interleaved rounds (medians); outputs checked against ONNX Runtime's. Results:
``benchmarks/results/wide_conv_tiles.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import convolution_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, map side)
    "3x3 32->64 @147 (Inception v3)": (32, 64, 3, 1, 147),
    "3x3 3->64 @224 (VGG)": (3, 64, 3, 1, 224),
    "3x3 64->128 @112 (VGG)": (64, 128, 3, 1, 112),
    "7x7/2 3->64 @224 (ResNet stem)": (3, 64, 7, 2, 224),
    "3x3 32->64 @112 (ResNet-D stem)": (32, 64, 3, 1, 112),
    "3x3 80->192 @71 (Inception v3)": (80, 192, 3, 1, 71),
    "3x3/2 3->32 @224 (MobileNet stem)": (3, 32, 3, 2, 224),
}  # fmt: skip


def main() -> int:
    return convolution_case_command(
        __doc__,
        CASES,
        ("WIDE_TILE_CHANNELS_AVX512", lambda conv: conv.CHANNELS_PER_WIDE_TILE),
        "wide_conv_tiles.jsonl",
    )


if __name__ == "__main__":
    sys.exit(main())
