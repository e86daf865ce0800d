"""Channel-vectorized convolution tiles a row of positions wide, written back a vector of
channels at a time (``conv.CHANNEL_VECTOR_WRITE_BACK_WIDE``) or along the row, a channel at a
time (before), with the activations that follow them, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/channel_write_back_wide.py [--runs 30] [--only CASE ...]

Each case is one convolution of one group and its activation, exported to ONNX (batch 1): 3x3
convolutions of stride 2 as fused-MBConv and ResNet stages open them, and 3x3 convolutions over
7 x 7, with SiLU or ReLU. Where the host has AVX-512 these take the channel-vectorized tile a
row of up to seven positions wide (:func:`conv.channel_vector_tile`). Compiled for the whole CPU
both ways, run end to end by our executor beside ONNX Runtime on the same cores and threads in
5 interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON line per case
in ``benchmarks/results/channel_write_back_wide.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_switch, module_case_command  # noqa: E402
from channel_write_back import ACTIVATIONS  # noqa: E402

CASES = {  # name: (input channels, output channels, stride, activation, map side)
    "3x3/2 32-64 @28 silu": (32, 64, 2, "silu", 28),
    "3x3/2 64-128 @14 silu": (64, 128, 2, "silu", 14),
    "3x3/2 128-256 @14 silu": (128, 256, 2, "silu", 14),
    "3x3/2 64-128 @14 relu": (64, 128, 2, "relu", 14),
    "3x3 256 @7 silu": (256, 256, 1, "silu", 7),
    "3x3 512 @7 relu": (512, 512, 1, "relu", 7),
}


def main() -> int:
    def make(cin: int, cout: int, stride: int, activation: str, side: int) -> tuple:
        def build() -> torch.nn.Module:
            conv = torch.nn.Conv2d(cin, cout, 3, stride, 1)
            return torch.nn.Sequential(conv, ACTIVATIONS[activation]())

        return build, (1, cin, side, side)

    off = conv_switch("CHANNEL_VECTOR_WRITE_BACK_WIDE", False)
    return module_case_command(__doc__, CASES, make, off, "channel_write_back_wide.jsonl")


if __name__ == "__main__":
    sys.exit(main())
