"""Convolutions whose threads take bands of output rows first where the input outweighs the
weights, or blocks of output channels first as before, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/row_bands.py [--runs 30] [--only CASE ...]

The convolution rule's parallel loop had run over blocks of output channels, then rows: each
thread read the whole input (and the copy that pads it, cut by channels, had been written half
by the other core). Where the input outweighs the weights (stems of three channels, early
layers over large maps) it now runs over bands of rows first and the copy is cut by rows too
(``conv.ROWS_BEFORE_CHANNELS``): each thread reads the band it padded and every weight. The
last case's weights outweigh its input: a control. Each case a convolution with ReLU after
it, exported to ONNX (batch 1), compiled for the whole CPU with the change and without it,
run end to end by our executor beside ONNX Runtime on the same cores and threads in
interleaved rounds (medians); outputs checked against ONNX Runtime's. ONNX Runtime's time
alone includes its reorders to and from its blocked layout, which inside a model it mostly
does not pay: compare whole models (``benchmarks/models/before_and_now.py``). Results:
``benchmarks/results/row_bands.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import convolution_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, map side)
    "3x3/2 3->64 @224 (SqueezeNet)": (3, 64, 3, 2, 224),
    "3x3/2 3->32 @224 (MobileNet-V2)": (3, 32, 3, 2, 224),
    "7x7/2 3->64 @224 (ResNet)": (3, 64, 7, 2, 224),
    "3x3 3->64 @224 (VGG)": (3, 64, 3, 1, 224),
    "3x3/2 64->128 @56": (64, 128, 3, 2, 56),
    "3x3/2 256->512 @28": (256, 512, 3, 2, 28),
}  # fmt: skip


def main() -> int:
    return convolution_case_command(
        __doc__, CASES, ("ROWS_BEFORE_CHANNELS", False), "row_bands.jsonl"
    )


if __name__ == "__main__":
    sys.exit(main())
