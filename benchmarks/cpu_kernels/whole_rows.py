"""Matmuls and 1x1 convolutions whose output is not in cache on one CPU, with the matmul rule's
row tiles over every panel and without them, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/whole_rows.py [--runs 30] [--only CASE ...]

A row tile computed one panel of ``B`` (32 output columns) and moved to the next row tile, so
each of its rows was written 128 bytes at a time, a row apart; where the output is larger than
L2 those writes went to memory. Blocks of panels were taken only where they fit L1 or L2 and
left 16 blocks or more, and where a block divided the panels (Whisper's 1,500 columns make 47,
a prime). With the change (``matmul.C_CACHED_BYTES``) a row tile sweeps every panel wherever
the output of a batch is over a megabyte and all of ``B``'s packed panels fit
``matmul.WIDE_A_BLOCK_BYTES``: its rows are written whole. The cases: attention's scores over
Whisper's 1,500 frames (``x @ x^T``, 6 heads of 64), ResNet-50's 1x1 64 -> 256 over 56 x 56,
ConvNeXt-T's first MLP layer (3,136 positions, 96 -> 384), and a control the change leaves
alone (a 1x1 128 -> 512 over 14 x 14: 400 KB of output). Each exported to ONNX, compiled for
the whole CPU with the change and without it (``before``), run end to end by our executor
beside ONNX Runtime on the same cores and threads in interleaved rounds (medians); outputs
checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/whole_rows.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402


class Scores(torch.nn.Module):
    """Attention's scores of a sequence with itself: ``x @ x^T`` per head."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ x.transpose(-1, -2)


def _pointwise(inputs: int, outputs: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(inputs, outputs, 1), torch.nn.ReLU())


CASES = {  # name: (module factory, input shape)
    "scores 6 x 1500 x 64": (Scores, (1, 6, 1500, 64)),
    "1x1 64->256 @56": (lambda: _pointwise(64, 256), (1, 64, 56, 56)),
    "linear 3136 x 96 -> 384": (lambda: torch.nn.Linear(96, 384), (1, 3136, 96)),
    "1x1 128->512 @14 (control)": (lambda: _pointwise(128, 512), (1, 128, 14, 14)),
}


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import matmul

        return (matmul, "C_CACHED_BYTES", 1 << 60)

    def export(case, path):
        return export_case(case[0], case[1], path)

    return case_command(__doc__, CASES, export, off, "whole_rows.jsonl")


if __name__ == "__main__":
    sys.exit(main())
