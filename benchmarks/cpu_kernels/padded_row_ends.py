"""Convolutions whose input is padded at the ends of its rows only, that padding run as masked
vectors (``GuardedReadsAsVectors.MASKED_EDGES``) against lane by lane (before), beside ONNX
Runtime (issue 56; issue 60: the tiles FlexPie cuts from the middle of a map).

    .venv/bin/python benchmarks/cpu_kernels/padded_row_ends.py [--runs 30] [--only CASE ...]

A tile cut from the middle of a map's rows gets its rows above and below from its neighbours:
its convolution pads the columns only (``padding=(0, 1)``), and so does a 1 x k convolution.
The copy that pads such rows guarded each read with the columns' bounds alone; with rows one or
two vectors wide, LLVM (for Zen 4) unrolled the lanes at the padded ends and vectorized the
loops around them, across the channels, with a gather and a scatter a vector. Cases: ResNet-18's
last 3x3 of 512 channels over the rows of FlexPie's inner tiles (6 rows of 7 in, 4 out), the
same layer's edge tile (padded above too: the copy was already vectors, a control), tiles of the
14 x 14 and 28 x 28 stages, Inception-v3's 1x7 of 192 channels over 17 x 17, and a 3x3 over
rows of 3. Each with ReLU after it, exported to ONNX (batch 1), compiled for the whole CPU both
ways, run end to end by our executor beside ONNX Runtime on the same cores and threads in 5
interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/padded_row_ends.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_relu_case_command, module_switch  # noqa: E402

CASES = {  # name: (input channels, output channels, window, padding, input rows, columns)
    "3x3 512 6x7 -> 4x7, inner tile": (512, 512, (3, 3), (0, 1), 6, 7),
    "3x3 512 4x7 -> 3x7, edge tile": (512, 512, (3, 3), (1, 1), 4, 7),
    "3x3 256 6x14 -> 4x14, inner tile": (256, 256, (3, 3), (0, 1), 6, 14),
    "3x3 128 9x28 -> 7x28, inner tile": (128, 128, (3, 3), (0, 1), 9, 28),
    "1x7 192 @17": (192, 192, (1, 7), (0, 3), 17, 17),
    "3x3 256 5x3 -> 3x3, inner tile": (256, 256, (3, 3), (0, 1), 5, 3),
}


def main() -> int:
    def conv(cin: int, cout: int, window: tuple, padding: tuple, rows: int, cols: int):
        return torch.nn.Conv2d(cin, cout, window, 1, padding)

    def shape(cin: int, cout: int, window: tuple, padding: tuple, rows: int, cols: int):
        return (1, cin, rows, cols)

    off = module_switch("tvm_hetero.passes.guarded_reads_as_vectors", "MASKED_EDGES", False)
    return conv_relu_case_command(__doc__, CASES, conv, shape, off, "padded_row_ends.jsonl")


if __name__ == "__main__":
    sys.exit(main())
