"""Convolutions whose output channels no vector divides, computed over whole vectors of them
and cropped (``PadConvolutionChannels``) or as given (before), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/padded_channels.py [--runs 30] [--only CASE ...]

Each case is one convolution with its bias and ReLU, exported to ONNX (batch 1): R(2+1)D's
factorised 1x3x3 layers (torchvision's ``r2plus1d_18``: 230, 460 and 921 channels, with and
without a stride over the rows and columns) and 3x3 ones of 72 channels as HRNet's branches
have. Compiled for the whole CPU both ways, run end to end by our executor beside ONNX Runtime
on the same cores and threads in 5 interleaved rounds (medians); outputs checked against ONNX
Runtime's. One JSON line per case in ``benchmarks/results/padded_channels.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window depth, stride, depth, map side)
    "1x3x3/2 64-230 @16x56": (64, 230, 1, 2, 16, 56),
    "1x3x3 128-230 @8x28": (128, 230, 1, 1, 8, 28),
    "1x3x3/2 128-460 @8x28": (128, 460, 1, 2, 8, 28),
    "1x3x3 256-460 @4x14": (256, 460, 1, 1, 4, 14),
    "1x3x3 512-921 @2x7": (512, 921, 1, 1, 2, 7),
    "3x3 72 @28": (72, 72, 0, 1, 0, 28),
    "3x3/2 36-72 @56": (36, 72, 0, 2, 0, 56),
}


def main() -> int:
    def make(cin: int, cout: int, depth: int, stride: int, frames: int, side: int) -> tuple:
        def build() -> torch.nn.Module:
            if depth == 0:
                return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, stride, 1),
                                           torch.nn.ReLU())  # fmt: skip
            window, steps, pad = (depth, 3, 3), (1, stride, stride), (depth // 2, 1, 1)
            return torch.nn.Sequential(torch.nn.Conv3d(cin, cout, window, steps, pad),
                                       torch.nn.ReLU())  # fmt: skip

        shape = (1, cin, side, side) if depth == 0 else (1, cin, frames, side, side)
        return build, shape

    def off() -> tuple:
        from tvm_hetero.passes import pad_convolution_channels

        return (pad_convolution_channels, "PAD_CHANNELS", False)

    return module_case_command(__doc__, CASES, make, off, "padded_channels.jsonl")


if __name__ == "__main__":
    sys.exit(main())
