"""Depthwise convolutions whose rows are one vector, tiled 7 rows at a time as wider rows are
(``conv.DEPTHWISE_ROWS_MIN_VECTORS`` of 1) or one row a tile (before), beside ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/depthwise_rows.py [--runs 30] [--only CASE ...]

Each case is one depthwise convolution with ReLU after it, exported to ONNX (batch 1): the
14 x 14 layers of MnasNet, MobileNet-V2 and EfficientNet-B0 (3x3 and 5x5, 384 to 672
channels; computed 16 wide with AVX-512, so one vector a row), and a 28 x 28 control whose
rows are two vectors (tiled either way). Compiled for the whole CPU both ways, run end to end
by our executor beside ONNX Runtime on the same cores and threads in 5 interleaved rounds
(medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/depthwise_rows.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_switch, module_case_command  # noqa: E402

CASES = {  # name: (channels, window, map side)
    "3x3 384 @14": (384, 3, 14),
    "3x3 576 @14": (576, 3, 14),
    "5x5 480 @14": (480, 5, 14),
    "5x5 672 @14": (672, 5, 14),
    "3x3 240 @28 (control)": (240, 3, 28),
}


def main() -> int:
    def make(channels: int, window: int, side: int) -> tuple:
        def build() -> torch.nn.Module:
            conv = torch.nn.Conv2d(channels, channels, window, 1, window // 2, groups=channels)
            return torch.nn.Sequential(conv, torch.nn.ReLU())

        return build, (1, channels, side, side)

    off = conv_switch("DEPTHWISE_ROWS_MIN_VECTORS", 2)
    return module_case_command(__doc__, CASES, make, off, "depthwise_rows.jsonl")


if __name__ == "__main__":
    sys.exit(main())
