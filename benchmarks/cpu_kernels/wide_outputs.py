"""Matmuls with wide outputs over a short ``K`` on one CPU, with the matmul rule's L2 blocks of
panels and without them, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/wide_outputs.py [--runs 30] [--only CASE ...]

A small decoder's vocabulary (``128 x 256`` by ``256 x 8000``) writes an output larger than
L2; in panels of 32 columns alone each row of a register tile is written 128 bytes at a time,
rows 32 KB apart. With blocks (``matmul.L2_BLOCK_BYTES``) a row tile sweeps up to 8 panels
(``B``'s block in L2) before the next row tile. Each case is a ``Linear(K, N, bias=False)``
over ``(1, M, K)``, exported to ONNX, compiled for the whole CPU with the change and without it
(``before``), run end to end by our executor beside ONNX Runtime on the same cores and threads
in interleaved rounds (medians); outputs checked against ONNX Runtime's. The last two cases
are controls the change leaves alone (panels of 96 KB: fewer than 4 fit the block). One JSON
line per case in ``benchmarks/results/wide_outputs.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import linear_case_command  # noqa: E402

CASES = [(128, 256, 8000), (128, 64, 8000), (128, 256, 4096), (128, 512, 2048),
         (128, 768, 3072), (197, 768, 3072)]  # fmt: skip
"""``(M, K, N)``: rows, depth and output columns."""


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import matmul

        return (matmul, "L2_BLOCK_BYTES", 0)

    return linear_case_command(__doc__, CASES, off, "wide_outputs.jsonl")


if __name__ == "__main__":
    sys.exit(main())
