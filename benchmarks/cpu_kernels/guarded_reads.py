"""Convolutions whose input copy pads it, that copy run a vector at a time where every lane is
inside the input (``GuardedReadsAsVectors``), against the loop LLVM vectorized itself with a
gather a vector where the stride lays the input out by column phase (before), beside ONNX
Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/guarded_reads.py [--runs 30] [--only CASE ...]

Each case is one convolution with 'same' padding and ReLU after it, exported to ONNX (batch
1): strided ones whose copy lays the input out by column phase (HGNetV2's 3x3 / 2 of 32 -> 16
over 112 x 112, MobileNetV4's of 32 -> 32, stems of three channels, ResNet's 7 x 7 stem and a
3x3 / 2 of 64 -> 128, a depthwise 3x3 / 2), one of stride 1 (its copy pads, contiguous), a
2x2 / 2 without padding (its copy by phase guards the columns past the input) and a 1x1 one
(no copy: both builds the same, a check on the noise). Compiled for the whole CPU both ways,
run end to end by our executor beside ONNX Runtime on the same cores and threads in 5
interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON line per case
in ``benchmarks/results/guarded_reads.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_relu_case_command, module_switch  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, groups, side, padding)
    "3x3 /2 32->16 @112": (32, 16, 3, 2, 1, 112, 1),
    "3x3 /2 32->32 @112": (32, 32, 3, 2, 1, 112, 1),
    "3x3 /2 3->32 @224": (3, 32, 3, 2, 1, 224, 1),
    "3x3 /2 3->16 @224": (3, 16, 3, 2, 1, 224, 1),
    "7x7 /2 3->64 @224": (3, 64, 7, 2, 1, 224, 3),
    "3x3 /2 64->128 @56": (64, 128, 3, 2, 1, 56, 1),
    "dw 3x3 /2 96 @112": (96, 96, 3, 2, 96, 112, 1),
    "3x3 16->16 @112": (16, 16, 3, 1, 1, 112, 1),
    "2x2 /2 32->16 @112, no padding": (32, 16, 2, 2, 1, 112, 0),
    "1x1 32->16 @112 (control)": (32, 16, 1, 1, 1, 112, 0),
}


def main() -> int:
    def conv(cin: int, cout: int, window: int, stride: int, groups: int, side: int,
             padding: int) -> torch.nn.Module:  # fmt: skip
        return torch.nn.Conv2d(cin, cout, window, stride, padding, groups=groups)

    def shape(cin: int, cout: int, window: int, stride: int, groups: int, side: int,
              padding: int) -> tuple:  # fmt: skip
        return (1, cin, side, side)

    off = module_switch("tvm_hetero.passes.guarded_reads_as_vectors", "VECTOR_READS", False)
    return conv_relu_case_command(__doc__, CASES, conv, shape, off, "guarded_reads.jsonl")


if __name__ == "__main__":
    sys.exit(main())
