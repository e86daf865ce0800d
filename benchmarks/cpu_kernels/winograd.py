"""3x3 convolutions of stride 1 on one CPU: the convolution rule's kernel (``before``) and
``WinogradConvolutions``' F(4 x 4, 3 x 3) or F(2 x 2, 3 x 3) (``now``), beside ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/winograd.py [--runs 30] [--only CASE ...]

Each case is a ``Conv2d`` 3x3, padding 1, with a bias and ReLU after it, exported to ONNX
(batch 1): the 3x3 layers of ResNet-18 / -50, VGG-11, DenseNet-121 and GoogLeNet, and two over
7 x 7 maps the pass leaves alone (fewer than 32 tiles of 2 x 2; ``before`` and ``now`` are one
kernel there); the 14 x 14 maps take F(2 x 2, 3 x 3). Compiled for the whole CPU with the pass and without it, run end to end by our executor
beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds (medians); outputs
checked against ONNX Runtime's (``err``: the larger absolute error of the two builds). One JSON
line per case in ``benchmarks/results/winograd.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (input channels, output channels, map)
    "64 -> 64 @56": (64, 64, 56),  # ResNet-18 / -50 layer 1
    "128 -> 128 @28": (128, 128, 28),  # layer 2
    "256 -> 256 @14": (256, 256, 14),  # layer 3
    "512 -> 512 @7": (512, 512, 7),  # layer 4: left alone
    "128 -> 256 @56": (128, 256, 56),  # VGG-11
    "256 -> 512 @28": (256, 512, 28),
    "512 -> 512 @14": (512, 512, 14),
    "128 -> 32 @56": (128, 32, 56),  # DenseNet-121's growth
    "128 -> 32 @14": (128, 32, 14),
    "128 -> 32 @7": (128, 32, 7),  # left alone
    "96 -> 128 @28": (96, 128, 28),  # GoogLeNet 3a
    "112 -> 224 @14": (112, 224, 14),  # GoogLeNet 4b
}


def conv_relu(inputs: int, outputs: int) -> torch.nn.Module:
    """A 3x3 convolution, padding 1, with a bias, ReLU after it."""
    return torch.nn.Sequential(torch.nn.Conv2d(inputs, outputs, 3, 1, 1), torch.nn.ReLU())


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.passes import winograd_convolutions

        return (winograd_convolutions, "rewritten", lambda *_: False)

    def export(c, path):
        return export_case(lambda c=c: conv_relu(*c[:2]), (1, c[0], c[2], c[2]), path)

    return case_command(__doc__, CASES, export, off, "winograd.jsonl")


if __name__ == "__main__":
    sys.exit(main())
