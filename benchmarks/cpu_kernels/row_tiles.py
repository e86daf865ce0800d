"""Matmuls on one CPU with AVX-512 register tiles of 12 rows where 12 divides the rows, and of
up to 8 as before, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/row_tiles.py [--runs 30] [--only CASE ...]

With AVX-512's 32 vector registers the matmul rule's tile is ``MR`` rows by two vectors: 12
rows where 12 divides the rows (``matmul.WIDEST_ROWS_PER_TILE``, ``matmul.tile_rows``: 24
accumulators, 24 multiply-adds for 14 loads), else the largest divisor up to 8 (16 for 10),
which was the rule for all rows before. Each case is a
``Linear(K, N, bias=False)`` over ``(1, M, K)``, exported to ONNX, compiled for the whole CPU
with the change and without it (``before``), run end to end by our executor beside ONNX
Runtime on the same cores and threads in interleaved rounds (medians); outputs checked against
ONNX Runtime's. Rows: Whisper's 1500 frames (6 rows before), 192, 96, 48 and 384; 128 (BERT's
tokens) and 197 (ViT's, padded to 200) are controls (8 rows either way). One JSON line per case in
``benchmarks/results/row_tiles.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import linear_case_command  # noqa: E402

CASES = [(1500, 384, 1536), (1500, 1536, 384), (192, 768, 3072), (96, 3072, 768),
         (48, 768, 768), (384, 768, 768), (128, 768, 3072), (197, 768, 3072)]  # fmt: skip
"""``(M, K, N)``: rows, depth and output columns."""


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import matmul

        return (matmul, "WIDEST_ROWS_PER_TILE", 8)

    return linear_case_command(__doc__, CASES, off, "row_tiles.jsonl")


if __name__ == "__main__":
    sys.exit(main())
