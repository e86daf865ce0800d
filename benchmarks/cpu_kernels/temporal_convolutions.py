"""3-D convolutions with a window along time only, computed as 2-D convolutions over (time,
height x width) (``TemporalConvolutionsAs2D``) or as 3-D ones (before), beside ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/temporal_convolutions.py [--runs 30]
        [--only CASE ...]

Each case is one convolution with its bias and ReLU, exported to ONNX (batch 1): S3D's first
temporal layer (a window of 7 frames, stride 2, over 112 x 112: too wide for the
channel-vectorized tile, so the pass takes it) and its 3x1x1 layers over 56 x 56 and 28 x 28,
which the channel tile takes and the pass leaves (their rows are the control). Compiled for the
whole CPU both ways, run end to end by our executor beside ONNX Runtime on the same cores and
threads in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON
line per case in ``benchmarks/results/temporal_convolutions.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, frames in window, stride, frames, side)
    "7x1x1/2 64 @16x112": (64, 64, 7, 2, 16, 112),
    "3x1x1 64 @8x112": (64, 64, 3, 1, 8, 112),
    "3x1x1 192 @8x56": (192, 192, 3, 1, 8, 56),
    "3x1x1 192 @8x28": (192, 192, 3, 1, 8, 28),
}


def main() -> int:
    def make(cin: int, cout: int, window: int, stride: int, frames: int, side: int) -> tuple:
        def build() -> torch.nn.Module:
            conv = torch.nn.Conv3d(cin, cout, (window, 1, 1), (stride, 1, 1), (window // 2, 0, 0))
            return torch.nn.Sequential(conv, torch.nn.ReLU())

        return build, (1, cin, frames, side, side)

    def off() -> tuple:
        from tvm_hetero.passes import temporal_convolutions_as_2d

        return (temporal_convolutions_as_2d, "AS_2D", False)

    return module_case_command(__doc__, CASES, make, off, "temporal_convolutions.jsonl")


if __name__ == "__main__":
    sys.exit(main())
