"""Concatenations on one CPU, with the pieces rule and without it, beside ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/concatenations.py [--runs 30] [--only CASE ...]

Each case concatenates copies of its input ``x`` along an axis (SqueezeNet's fire modules over
55 x 55 to 13 x 13, Inception's four branches at 35 x 35, a ViT's class token before its 196
patches), exported to ONNX (batch 1), compiled for the whole CPU as it is (``now``: the
``pieces`` rule, a block per input) and with the rule off (``before``: the injective rule, one
block choosing its input per element), run end to end by our executor beside ONNX Runtime on
the same cores and threads, in interleaved rounds (medians); outputs checked against ONNX
Runtime's. One JSON line per case in ``benchmarks/results/concatenations.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (input shape, copies, axis)
    "2 x 64 @55": ((1, 64, 55, 55), 2, 1),
    "2 x 128 @27": ((1, 128, 27, 27), 2, 1),
    "2 x 256 @13": ((1, 256, 13, 13), 2, 1),
    "4 x 64 @35": ((1, 64, 35, 35), 4, 1),
    "1 + 196 tokens x 192": ((1, 196, 192), 0, 1),
}
"""``copies`` 0: the first token of ``x`` put before all of them (a class token)."""


class Concatenation(torch.nn.Module):
    def __init__(self, copies: int, axis: int) -> None:
        super().__init__()
        self.copies, self.axis = copies, axis

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [x[:, :1], x] if self.copies == 0 else [x] * self.copies
        return torch.cat(parts, self.axis)


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import pieces

        return (pieces, "_cut", lambda *_: None)

    def export(case, path):
        return export_case(lambda c=case: Concatenation(*c[1:]), case[0], path)

    return case_command(__doc__, CASES, export, off, "concatenations.jsonl")


if __name__ == "__main__":
    sys.exit(main())
