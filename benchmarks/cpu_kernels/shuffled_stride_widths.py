"""Depthwise and grouped convolutions with a column stride of 2, widened to whole vectors as
unit-stride ones are (``PadConvolutionOutputs.SHUFFLED_STRIDES``) or to the fewest vectors of
any width (before: the stride counted as read lane by lane), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/shuffled_stride_widths.py [--runs 30] [--only CASE ...]

``StridedLoadsAsShuffles`` reads a vector of every other column as two whole vectors and a
permute; a vector of 14 lanes (56 columns in vectors of 14) was read as pieces of 8, 4 and 2
floats put together first. Each case is one convolution with a stride of 2 and ReLU after it,
exported to ONNX (batch 1): the strided depthwise layers of MnasNet (48 channels from
112 x 112, 72 from 56 x 56 with 5x5), MobileNet-V2 (32 and 96 from 112 x 112, 144 from
56 x 56), EfficientNet-B0 (144 from 56 x 56 with 5x5), a grouped one as RegNet-X's (groups of
16 channels), and a control the channel tile takes (240 from 28 x 28, 14 columns). Compiled
for the whole CPU both ways, run end to end by our executor beside ONNX Runtime on the same
cores and threads in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's.
One JSON line per case in ``benchmarks/results/shuffled_stride_widths.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command  # noqa: E402

CASES = {  # name: (channels, window, map side, channels a group)
    "3x3/2 48 @112": (48, 3, 112, 1),
    "3x3/2 32 @112": (32, 3, 112, 1),
    "3x3/2 96 @112": (96, 3, 112, 1),
    "3x3/2 144 @56": (144, 3, 56, 1),
    "5x5/2 72 @56": (72, 5, 56, 1),
    "5x5/2 144 @56": (144, 5, 56, 1),
    "3x3/2 64 @56, groups of 16": (64, 3, 56, 16),
    "5x5/2 240 @28 (control)": (240, 5, 28, 1),
}


def main() -> int:
    def make(channels: int, window: int, side: int, per_group: int) -> tuple:
        def build() -> torch.nn.Module:
            groups = channels // per_group
            conv = torch.nn.Conv2d(channels, channels, window, 2, window // 2, groups=groups)
            return torch.nn.Sequential(conv, torch.nn.ReLU())

        return build, (1, channels, side, side)

    def off() -> tuple:
        from tvm_hetero.passes import pad_convolution_outputs

        return (pad_convolution_outputs, "SHUFFLED_STRIDES", False)

    return module_case_command(__doc__, CASES, make, off, "shuffled_stride_widths.jsonl")


if __name__ == "__main__":
    sys.exit(main())
