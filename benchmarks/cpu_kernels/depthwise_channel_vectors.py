"""Depthwise convolutions over small maps on one CPU: the convolution rule's width-vectorized
kernel (a vector of output columns) and its channel-vectorized one (a vector of channels a
position, the padded input laid out channels innermost), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/depthwise_channel_vectors.py [--runs 30] [--only CASE ...]

Each case is a depthwise ``Conv2d`` with 'same' padding and ReLU6 after it, exported to ONNX
(batch 1): the layers of MnasNet, EfficientNet-B0 and the MobileNets whose output rows are 7 or
14 columns, and two over 28 columns (wider than ``DEPTHWISE_CHANNEL_VECTOR_MAX_WIDTH``: both
builds the same, a check on the noise). Compiled for the whole CPU with the channel-vectorized
tile and without it (``before``: ``DEPTHWISE_CHANNEL_VECTOR_MAX_WIDTH`` 0), run end to end by
our executor beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds
(medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/depthwise_channel_vectors.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command, conv_switch  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (channels, window, stride, input side)
    "5x5 1152 @7": (1152, 5, 1, 7),
    "3x3 1152 @7": (1152, 3, 1, 7),
    "3x3 960 @7": (960, 3, 1, 7),
    "5x5 672 @14 /2": (672, 5, 2, 14),
    "3x3 576 @14 /2": (576, 3, 2, 14),
    "5x5 480 @14": (480, 5, 1, 14),
    "3x3 384 @14": (384, 3, 1, 14),
    "5x5 240 @28 /2": (240, 5, 2, 28),
    "3x3 144 @28": (144, 3, 1, 28),
    "5x5 120 @28": (120, 5, 1, 28),
}


def depthwise(channels: int, window: int, stride: int) -> torch.nn.Module:
    """A depthwise convolution with 'same' padding, ReLU6 after it."""
    conv = torch.nn.Conv2d(channels, channels, window, stride, window // 2, groups=channels)
    return torch.nn.Sequential(conv, torch.nn.ReLU6())


def main() -> int:
    def export(case, path):
        channels, window, stride, side = case
        shape = (1, channels, side, side)
        return export_case(lambda: depthwise(channels, window, stride), shape, path)

    off = conv_switch("DEPTHWISE_CHANNEL_VECTOR_MAX_WIDTH", 0)
    return case_command(__doc__, CASES, export, off, "depthwise_channel_vectors.jsonl")


if __name__ == "__main__":
    sys.exit(main())
