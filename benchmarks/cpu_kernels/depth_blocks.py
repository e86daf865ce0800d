"""1x1 convolutions over small maps summed in blocks of their depth, or over the whole depth at
once, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/depth_blocks.py [--runs 30] [--only CASE ...]

A 1x1 convolution over a small map (14 x 14, 7 x 7) takes its weights as the matmul rule's
columns; a panel of them deeper than 16 KiB is now summed in blocks of at most 16 KiB, each
over every row tile of the panel (``matmul.depth_block``); ``before``: each row tile over the
whole panel. Cases: ResNet-50's bottleneck pairs (1024 -> 256 -> 1024 over 14 x 14, 2048 ->
512 -> 2048 over 7 x 7) as eight pairs in a row, as in its third and fourth stages, where each
kernel's weights and input come from beyond L2, and one pair alone, whose weights stay in L2
from one run to the next; MnasNet's 576 -> 96 over 14 x 14 alone (its threads share the row
tiles). Each case exported to ONNX (batch 1, ReLU after each convolution), compiled for the
whole CPU with the change and without it, run end to end by our executor beside ONNX Runtime
on the same cores and threads in interleaved rounds (medians); outputs checked against ONNX
Runtime's. Results: ``benchmarks/results/depth_blocks.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (input channels, inner channels or 0 for one layer, map side, pairs)
    "8 x 1024->256->1024 @14": (1024, 256, 14, 8),
    "1024->256->1024 @14": (1024, 256, 14, 1),
    "8 x 2048->512->2048 @7": (2048, 512, 7, 8),
    "2048->512->2048 @7": (2048, 512, 7, 1),
    "576->96 @14": (576, 96, 14, 0),
}  # fmt: skip


def pairs(channels: int, inner: int, count: int) -> torch.nn.Module:
    """``count`` 1x1 convolutions ``channels -> inner -> channels``, ReLU after each, in a row;
    one ``channels -> inner`` convolution where ``count`` is 0."""
    if count == 0:
        return torch.nn.Sequential(torch.nn.Conv2d(channels, inner, 1), torch.nn.ReLU())
    layers = []
    for _ in range(count):
        layers += [torch.nn.Conv2d(channels, inner, 1), torch.nn.ReLU()]
        layers += [torch.nn.Conv2d(inner, channels, 1), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import matmul

        return (matmul, "DEPTH_BLOCK_BYTES", 1 << 40)

    def export(case, path):
        channels, inner, side, count = case
        shape = (1, channels, side, side)
        return export_case(lambda: pairs(channels, inner, count), shape, path)

    return case_command(__doc__, CASES, export, off, "depth_blocks.jsonl")


if __name__ == "__main__":
    sys.exit(main())
