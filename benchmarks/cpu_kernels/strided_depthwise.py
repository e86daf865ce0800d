"""Strided depthwise convolutions on one CPU: the convolution rule's kernel as it was (a lane a
column) and ``DepthwiseColumnsAfter``'s (rows with every column, then the columns), and ONNX
Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/strided_depthwise.py [--runs 30] [--only CASE ...]

Each case is a depthwise ``Conv2d`` with stride 2 and ReLU6 after it, exported to ONNX (batch
1): the strided layers of MobileNet v2 / v3, MnasNet and EfficientNet-B0 (3x3 and 5x5). Compiled
for the whole CPU with the pass and without it (``before``), run end to end by our executor
beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds (medians); outputs
checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/strided_depthwise.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (channels, window, input shape)
    "3x3 32 @112": (32, 3, (1, 32, 112, 112)),
    "3x3 96 @112": (96, 3, (1, 96, 112, 112)),
    "3x3 144 @56": (144, 3, (1, 144, 56, 56)),
    "5x5 144 @56": (144, 5, (1, 144, 56, 56)),
    "5x5 72 @56": (72, 5, (1, 72, 56, 56)),
    "3x3 192 @28": (192, 3, (1, 192, 28, 28)),
    "5x5 240 @28": (240, 5, (1, 240, 28, 28)),
    "3x3 576 @14": (576, 3, (1, 576, 14, 14)),
}


def depthwise(channels: int, window: int) -> torch.nn.Module:
    """A depthwise convolution with stride 2 and 'same' padding, ReLU6 after it."""
    conv = torch.nn.Conv2d(channels, channels, window, 2, window // 2, groups=channels)
    return torch.nn.Sequential(conv, torch.nn.ReLU6())


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.passes import depthwise_columns_after

        return (depthwise_columns_after, "rewritten", lambda *_: False)

    def export(case, path):
        return export_case(lambda c=case: depthwise(*c[:2]), case[2], path)

    return case_command(__doc__, CASES, export, off, "strided_depthwise.jsonl")


if __name__ == "__main__":
    sys.exit(main())
