"""Depthwise convolutions of the channel-vectorized tile with their input and output copied
through blocked buffers by register transposes (``conv.BLOCKED_COPIES``), against a vector of
channels read and written a lane at a time (before), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/blocked_copies.py [--runs 30] [--only CASE ...]

Each case is one depthwise convolution with 'same' padding and ReLU6 after it, exported to
ONNX (batch 1): the layers of MobileNet-V2 and -V3, MnasNet and EfficientNet-B0 that take the
channel-vectorized tile (rows of 7 columns, 14 with a stride of 2), and a 14 x 14 layer that
takes the width-vectorized tile (both builds the same: a check on the noise). Compiled for the
whole CPU both ways, run end to end by our executor beside ONNX Runtime on the same cores and
threads in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON
line per case in ``benchmarks/results/blocked_copies.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_switch, module_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, groups, input side)
    "dw 3x3 960 @7": (960, 960, 3, 1, 960, 7),
    "dw 5x5 960 @7": (960, 960, 5, 1, 960, 7),
    "dw 3x3 1152 @7": (1152, 1152, 3, 1, 1152, 7),
    "dw 5x5 1152 @7": (1152, 1152, 5, 1, 1152, 7),
    "dw 3x3 576 @14 /2": (576, 576, 3, 2, 576, 14),
    "dw 5x5 672 @14 /2": (672, 672, 5, 2, 672, 14),
    "dw 5x5 240 @28 /2": (240, 240, 5, 2, 240, 28),
    "g16 3x3 288 @28": (288, 288, 3, 1, 18, 28),
    "g16 3x3 576 @14": (576, 576, 3, 1, 36, 14),
    "g16 3x3 144 @56": (144, 144, 3, 1, 9, 56),
    "3x3 256 @7": (256, 256, 3, 1, 1, 7),
    "3x3 512 @7": (512, 512, 3, 1, 1, 7),
    "3x3 64-128 @14 /2": (64, 128, 3, 2, 1, 14),
    "dw 3x3 384 @14 (control)": (384, 384, 3, 1, 384, 14),
}


def main() -> int:
    def make(cin: int, cout: int, window: int, stride: int, groups: int, side: int) -> tuple:
        def build() -> torch.nn.Module:
            conv = torch.nn.Conv2d(cin, cout, window, stride, window // 2, groups=groups)
            return torch.nn.Sequential(conv, torch.nn.ReLU6())

        return build, (1, cin, side, side)

    off = conv_switch("BLOCKED_COPIES", False)
    return module_case_command(__doc__, CASES, make, off, "blocked_copies.jsonl")


if __name__ == "__main__":
    sys.exit(main())
