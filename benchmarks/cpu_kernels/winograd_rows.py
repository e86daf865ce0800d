"""Winograd convolutions on one CPU with the kernel that lays their tiles back out as a map
tiled along the columns (``before``) and written a row of channel vectors at a time, copied out
by transposes (``now``, ``transposed.blocked_rows``), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/winograd_rows.py [--runs 30] [--only CASE ...]

Each case is a small torch module around one 3x3 convolution of stride 1 that
``WinogradConvolutions`` rewrites, exported to ONNX (batch 1), with what fuses into that last
kernel in the models it comes from: SqueezeNet 1.1's fire modules (a 1x1 and a 3x3 branch over
the squeezed map, each with ReLU, concatenated: the 3x3 branch's map is a piece of the
concatenation), ResNet-18's second convolution of a block (the residual sum and ReLU) and a 3x3
layer with ReLU alone (DenseNet-121's growth, VGG-11's). Compiled for the whole CPU with the
change and without it, run end to end by our executor beside ONNX Runtime on the same cores and
threads, in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON
line per case in ``benchmarks/results/winograd_rows.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command, module_switch  # noqa: E402


class Fire(torch.nn.Module):
    """SqueezeNet's expand layers: ``cat(relu(conv1x1(x)), relu(conv3x3(x)))``."""

    def __init__(self, squeezed: int, expanded: int) -> None:
        super().__init__()
        self.one = torch.nn.Conv2d(squeezed, expanded, 1)
        self.three = torch.nn.Conv2d(squeezed, expanded, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.relu(self.one(x)), torch.relu(self.three(x))], 1)


class Residual(torch.nn.Module):
    """A ResNet block's second convolution: ``relu(conv3x3(x) + x)``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) + x)


CASES = {  # name: (kind, input channels, output channels, map side)
    "fire 16 -> 2 x 64 @55": ("fire", 16, 64, 55),  # SqueezeNet 1.1's fire2 / fire3
    "fire 32 -> 2 x 128 @27": ("fire", 32, 128, 27),  # fire4 / fire5
    "fire 64 -> 2 x 256 @13": ("fire", 64, 256, 13),  # fire8 / fire9
    "residual 64 @56": ("residual", 64, 64, 56),  # ResNet-18 layer 1
    "residual 128 @28": ("residual", 128, 128, 28),  # layer 2
    "relu 128 -> 32 @56": ("relu", 128, 32, 56),  # DenseNet-121's growth
    "relu 128 -> 256 @56": ("relu", 128, 256, 56),  # VGG-11
}


def _module(kind: str, inputs: int, outputs: int, side: int) -> tuple:
    """The case's module builder and its input's shape."""
    if kind == "fire":
        build = lambda: Fire(inputs, outputs)  # noqa: E731
    elif kind == "residual":
        build = lambda: Residual(inputs)  # noqa: E731
    else:
        build = lambda: torch.nn.Sequential(  # noqa: E731
            torch.nn.Conv2d(inputs, outputs, 3, padding=1), torch.nn.ReLU()
        )
    return build, (1, inputs, side, side)


def main() -> int:
    off = module_switch("tvm_hetero.schedules.cpu.transposed", "BLOCKED_ROWS", False)
    return module_case_command(__doc__, CASES, _module, off, "winograd_rows.jsonl")


if __name__ == "__main__":
    sys.exit(main())
