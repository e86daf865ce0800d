"""Softmax over the tokens (``axis=2`` of heads x tokens x channels) on one CPU: each column
reduced once, against the reduction rule as it was, and ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/softmax_over_tokens.py [--runs 10] [--only CASE ...]

CoaT's factorized attention normalises its keys over the tokens, not over a row. dlight's
schedule put each column's max and sum under the output's fused heads and tokens, so every
column was reduced again for each token; the check for a reduction under a loop it does not
use (``reduction.unused_loop_runs``, ``before``) missed it, the loop's variable being used by
the heads. ``now``: ``reduction.recomputed`` counts a block's runs against its domain, and the
rule reduces each column once. Cases: CoaT-Lite Tiny's two stages of 785 and 197 tokens, and
its first of 3,137 (sums of 2,048 elements or more were reduced once already: both builds the
same). Each compiled for the whole CPU, run end to end by our executor beside ONNX Runtime on
the same cores and threads, in 5 interleaved rounds (medians); outputs checked against ONNX
Runtime's. One JSON line per case in ``benchmarks/results/softmax_over_tokens.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402


class SoftmaxOverTokens(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=2)


CASES = {  # name: input shape
    "CoaT 8 x 785 x 16": (1, 8, 785, 16),
    "CoaT 8 x 197 x 32": (1, 8, 197, 32),
    "CoaT 8 x 3137 x 8": (1, 8, 3137, 8),
}


def main() -> int:
    def off() -> list[tuple]:
        from tvm_hetero.schedules.cpu import reduction

        return [(reduction, "recomputed", reduction.unused_loop_runs),
                (reduction, "COLUMNS_IN_LANES", False)]  # fmt: skip

    def export(shape, path):
        return export_case(SoftmaxOverTokens, shape, path)

    return case_command(__doc__, CASES, export, off, "softmax_over_tokens.jsonl")


if __name__ == "__main__":
    sys.exit(main())
