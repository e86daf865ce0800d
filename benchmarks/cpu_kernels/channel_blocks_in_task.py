"""Channel-vectorized convolutions whose input outweighs their weights, each task computing
every block of output channels over its row tile (``conv.CHANNEL_BLOCKS_IN_TASK``) or one
block (before), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/channel_blocks_in_task.py [--runs 30]
        [--only CASE ...]

Each case is one convolution with its bias and ReLU, exported to ONNX (batch 1): the temporal
3x1x1 convolutions of S3D and R(2+1)D (torchvision's video models, which factorise each 3-D
window into a spatial and a temporal one), and 2-D ones whose input outweighs their weights
(ResNet's 3x3 of stride 2 into 28 x 28, MobileNetV4's over 112 x 112). Compiled for the whole
CPU both ways, run end to end by our executor beside ONNX Runtime on the same cores and
threads in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON
line per case in ``benchmarks/results/channel_blocks_in_task.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_switch, module_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, frames or 0, map side)
    "3x1x1 192 @8x56": (192, 192, (3, 1, 1), 1, 8, 56),
    "3x1x1 192 @8x28": (192, 192, (3, 1, 1), 1, 8, 28),
    "3x1x1 144-64 @16x56": (144, 64, (3, 1, 1), 1, 16, 56),
    "3x1x1 320 @4x14": (320, 320, (3, 1, 1), 1, 4, 14),
    "3x3/2 64-128 @56": (64, 128, (3, 3), 2, 0, 56),
    "3x3/2 32-64 @112": (32, 64, (3, 3), 2, 0, 112),
}


def main() -> int:
    def make(cin: int, cout: int, window: tuple, stride: int, frames: int, side: int) -> tuple:
        def build() -> torch.nn.Module:
            pad = tuple(k // 2 for k in window)
            if frames:
                steps = (1, stride, stride)
                conv = torch.nn.Conv3d(cin, cout, window, steps, pad)
            else:
                conv = torch.nn.Conv2d(cin, cout, window, stride, pad)
            return torch.nn.Sequential(conv, torch.nn.ReLU())

        shape = (1, cin, frames, side, side) if frames else (1, cin, side, side)
        return build, shape

    off = conv_switch("CHANNEL_BLOCKS_IN_TASK", False)
    return module_case_command(__doc__, CASES, make, off, "channel_blocks_in_task.jsonl")


if __name__ == "__main__":
    sys.exit(main())
