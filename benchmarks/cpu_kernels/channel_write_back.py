"""Channel-vectorized convolution tiles one position wide, written back a vector of channels at
a time (``conv.CHANNEL_VECTOR_WRITE_BACK``) or along the width, a position at a time (before),
with the activations that follow them in real networks, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/channel_write_back.py [--runs 30] [--only CASE ...]

Each case is one convolution and its activation, exported to ONNX (batch 1): RegNetZ-B16's
grouped 3x3 convolutions (16 channels a group) with SiLU, EfficientNet-B0's depthwise layers
over 7 x 7 and 14 x 14 with SiLU, MobileNetV3's with hard-swish, and a grouped one with ReLU
(whose epilogue costs little either way). Compiled for the whole CPU both ways, run end to end
by our executor beside ONNX Runtime on the same cores and threads in 5 interleaved rounds
(medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/channel_write_back.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_switch, module_case_command  # noqa: E402

CASES = {  # name: (channels, window, group size, activation, map side)
    "g16 3x3 144 @56 silu": (144, 3, 16, "silu", 56),
    "g16 3x3 288 @28 silu": (288, 3, 16, "silu", 28),
    "g16 3x3 576 @14 silu": (576, 3, 16, "silu", 14),
    "g16 3x3 288 @28 relu": (288, 3, 16, "relu", 28),
    "dw 5x5 672 @14 silu": (672, 5, 1, "silu", 14),
    "dw 3x3 1152 @7 silu": (1152, 3, 1, "silu", 7),
    "dw 5x5 960 @7 hardswish": (960, 5, 1, "hardswish", 7),
}
ACTIVATIONS = {"silu": torch.nn.SiLU, "relu": torch.nn.ReLU, "hardswish": torch.nn.Hardswish}


def layer(channels: int, window: int, group: int, activation: str) -> torch.nn.Module:
    """A convolution of ``channels`` channels in groups of ``group``, 'same' padding, and its
    activation."""
    conv = torch.nn.Conv2d(channels, channels, window, 1, window // 2, groups=channels // group)
    return torch.nn.Sequential(conv, ACTIVATIONS[activation]())


def main() -> int:
    def make(channels: int, window: int, group: int, activation: str, side: int) -> tuple:
        return (lambda: layer(channels, window, group, activation)), (1, channels, side, side)

    off = conv_switch("CHANNEL_VECTOR_WRITE_BACK", False)
    return module_case_command(__doc__, CASES, make, off, "channel_write_back.jsonl")


if __name__ == "__main__":
    sys.exit(main())
