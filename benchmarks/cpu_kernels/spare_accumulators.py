"""Convolutions over rows a tile of 7 positions does not divide, in channel tiles of 6 positions
(one accumulator spare, ``conv.SPARE_ACCUMULATORS``) against widened to a tile of 7 or
width-vectorized (before), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/spare_accumulators.py [--runs 30] [--only CASE ...]

With AVX-512 a convolution's channel-vectorized tile holds 7 positions of two channel vectors;
a map a few columns short of a multiple of 7 was computed that much wider (Inception's 17 x 17
at 21: a quarter of its work on columns it crops). With an accumulator spare, 17 columns are
18 in tiles of 6 (only where a tile of 7 was that near). Cases: Inception-v3's 1x7 and 7x1
convolutions of 128 to 192 channels over 17 x 17; 24 x 24, now tiles of 6 where it was
computed 28 wide; and controls the change leaves as they were (8 x 8, Inception's last stage,
and 16 x 16: no tile of 7 near, whole vectors both ways). Each with ReLU after it, exported to ONNX (batch 1), compiled for the whole CPU both ways,
run end to end by our executor beside ONNX Runtime on the same cores and threads in 5
interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/spare_accumulators.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_switch, square_conv_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, padding, map side)
    "1x7 192 @17": (192, 192, (1, 7), (0, 3), 17),
    "7x1 192 @17": (192, 192, (7, 1), (3, 0), 17),
    "1x7 160 @17": (160, 160, (1, 7), (0, 3), 17),
    "1x7 128 @17": (128, 128, (1, 7), (0, 3), 17),
    "1x3 384 @8": (384, 384, (1, 3), (0, 1), 8),
    "3x1 384 @8": (384, 384, (3, 1), (1, 0), 8),
    "3x3 256 @16": (256, 256, (3, 3), (1, 1), 16),
    "3x3 128 @24": (128, 128, (3, 3), (1, 1), 24),
}


def main() -> int:
    off = module_switch("tvm_hetero.schedules.cpu.conv", "SPARE_ACCUMULATORS", 0)
    return square_conv_case_command(__doc__, CASES, off, "spare_accumulators.jsonl")


if __name__ == "__main__":
    sys.exit(main())
