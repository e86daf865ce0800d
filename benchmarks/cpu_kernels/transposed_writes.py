"""1x1 convolutions over small maps written back a vector of positions a channel, or a vector of
channels a position, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/transposed_writes.py [--runs 30] [--only CASE ...]

A 1x1 convolution over a small map (14 x 14, 7 x 7) takes its weights as the matmul rule's
columns, so its register tile (positions by output channels) is the output's transpose. It is
now written back one output channel at a time, a vector of the tile's consecutive positions
each, with its epilogue (bias, activation, residual add) computed in those vectors
(``matmul.write_by_position``); ``before``: a position at a time, its vector of channels
scattered a map apart, one scalar store a channel. Cases: MobileNet-V2's and MnasNet's
inverted residual pairs without their depthwise layers (``C -> 6C`` with ReLU, ``6C -> C`` plus
the block's input), four in a row as inside the model; the same with EfficientNet's swish
(``x * sigmoid(x)``); one widening layer alone. Each case exported to ONNX (batch 1), compiled
for the whole CPU with the change and without it, run end to end by our executor beside ONNX
Runtime on the same cores and threads in interleaved rounds (medians); outputs checked against
ONNX Runtime's. Results: ``benchmarks/results/transposed_writes.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command  # noqa: E402

CASES = {  # name: (channels, expanded channels, map side, blocks or 0 for one layer, swish)
    "4 x 96->576->96 @14": (96, 576, 14, 4, False),
    "4 x 160->960->160 @7": (160, 960, 7, 4, False),
    "4 x 80->480->80 @14, swish": (80, 480, 14, 4, True),
    "96->576 @14": (96, 576, 14, 0, False),
}  # fmt: skip


class Swish(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class Pair(torch.nn.Module):
    """``x + conv(act(conv(x)))``: an inverted residual block's two 1x1 convolutions."""

    def __init__(self, channels: int, expanded: int, swish: bool) -> None:
        super().__init__()
        self.expand = torch.nn.Conv2d(channels, expanded, 1)
        self.act = Swish() if swish else torch.nn.ReLU()
        self.project = torch.nn.Conv2d(expanded, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(self.act(self.expand(x)))


def blocks(channels: int, expanded: int, count: int, swish: bool) -> torch.nn.Module:
    """``count`` :class:`Pair` blocks in a row; one ``channels -> expanded`` convolution with
    its activation where ``count`` is 0."""
    if count == 0:
        act = Swish() if swish else torch.nn.ReLU()
        return torch.nn.Sequential(torch.nn.Conv2d(channels, expanded, 1), act)
    return torch.nn.Sequential(*[Pair(channels, expanded, swish) for _ in range(count)])


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import matmul

        return (matmul, "write_by_position", lambda *_: None)

    def make(channels: int, expanded: int, side: int, count: int, swish: bool) -> tuple:
        return (lambda: blocks(channels, expanded, count, swish)), (1, channels, side, side)

    return module_case_command(__doc__, CASES, make, off, "transposed_writes.jsonl")


if __name__ == "__main__":
    sys.exit(main())
