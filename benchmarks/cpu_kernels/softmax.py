"""Softmax over attention rows on one CPU: dlight's row schedule, rows reduced in vector lanes
(``reduction.rows_in_vectors``), and ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/softmax.py [--runs 30] [--only CASE ...]

Each case is ``torch.softmax(x, dim=-1)`` over attention scores (batch 1, heads x rows x
keys) exported to ONNX: BERT's 12 x 128 x 128, ViT's 197 keys (a prime: no vector divides the
row, which is padded to whole vectors), LeViT's 196 and Whisper's 1,500 (whose largest divisors
up to the lanes, 14 and 15 with AVX-512, are no powers of two: padded too) and SegFormer's
reduced keys.
Compiled for the whole CPU with rows in lanes and without (``before``), run end to end by our
executor beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds (medians);
outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/softmax.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402


class Softmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


CASES = {  # name: input shape
    "BERT 12 x 128 x 128": (1, 12, 128, 128),
    "ViT 3 x 197 x 197": (1, 3, 197, 197),
    "LeViT 4 x 196 x 196": (1, 4, 196, 196),
    "SegFormer 1 x 16384 x 256": (1, 1, 16384, 256),
    "Whisper 6 x 1500 x 1500": (1, 6, 1500, 1500),
}


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import reduction

        return (reduction, "rows_in_vectors", lambda *_: None)

    def export(shape, path):
        return export_case(Softmax, shape, path)

    return case_command(__doc__, CASES, export, off, "softmax.jsonl")


if __name__ == "__main__":
    sys.exit(main())
