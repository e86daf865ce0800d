"""Matmuls whose ``A`` is over a megabyte on one CPU, with the matmul rule's blocks of panels for
a large ``A`` and without them, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/tall_inputs.py [--runs 30] [--only CASE ...]

Each panel of ``B`` (32 output columns) is computed over every row of ``A``; where ``A`` is
larger than L2 (Whisper's 1,500 tokens, SegFormer's 16,384 at its first stage) every panel
read it again from L3 or memory. With the change (``matmul.A_CACHED_BYTES``) row tiles sweep
blocks of packed panels up to ``matmul.WIDE_A_BLOCK_BYTES``, so ``A`` is read once a block,
and the threads share a block's row tiles. Each case is a ``Linear(K, N, bias=False)`` over
``(1, M, K)``, exported to ONNX, compiled for the whole CPU with the change and without it
(``before``), run end to end by our executor beside ONNX Runtime on the same cores and threads
in interleaved rounds (medians); outputs checked against ONNX Runtime's. The last case is a
control the change leaves alone (ViT-Base's 197 tokens: ``A`` 600 KB). One JSON line per case
in ``benchmarks/results/tall_inputs.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import linear_case_command  # noqa: E402

CASES = [(16384, 32, 128), (1500, 256, 1536), (1500, 1536, 256), (2048, 1024, 1024),
         (197, 768, 3072)]  # fmt: skip
"""``(M, K, N)``: rows, depth and output columns."""


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import matmul

        return (matmul, "A_CACHED_BYTES", 1 << 60)

    return linear_case_command(__doc__, CASES, off, "tall_inputs.jsonl")


if __name__ == "__main__":
    sys.exit(main())
