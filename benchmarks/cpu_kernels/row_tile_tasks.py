"""Strided convolutions over large maps whose tasks each pad the input rows they read, beside the
parallel pass that padded the whole input first, and beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/row_tile_tasks.py [--runs 30] [--only CASE ...]

Where a convolution's threads take bands of rows (its input outweighs its weights), its padded
input is over half a MiB and a tile's rows overlap little (a 3x3 window with stride 2: a tile
of one row reads 3 rows for 2, of two rows 5 for 4), each task is a row tile of a band with
every block of output channels inside it, and pads and lays out by column phase the rows it
reads (``conv.ROW_TILE_TASKS``); before, a parallel pass padded the whole input into memory
and the tasks, a channel block and a row tile each, read it back. The 3x3 / 2 over 56 x 56 of
32 channels (430 KiB padded) and the 3x3 with stride 1 (a tile of one row reads three) keep
the pass: controls. Each case a convolution with ReLU after it, exported to ONNX (batch 1),
compiled for the whole CPU with the change and without it, run end to end by our executor
beside ONNX Runtime on the same cores and threads in interleaved rounds (medians); outputs
checked against ONNX Runtime's. Results: ``benchmarks/results/row_tile_tasks.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import convolution_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, map side)
    "3x3/2 32->32 @112 (MobileNetV4)": (32, 32, 3, 2, 112),
    "3x3/2 16->64 @112": (16, 64, 3, 2, 112),
    "3x3/2 64->128 @56 (ResNet)": (64, 128, 3, 2, 56),
    "3x3/2 128->256 @56 (HRNet)": (128, 256, 3, 2, 56),
    "3x3/2 3->32 @224 (MobileNet-V2)": (3, 32, 3, 2, 224),
    "3x3/2 32->96 @56 (MobileNetV4)": (32, 96, 3, 2, 56),
    "3x3 64->64 @56 (ResNet)": (64, 64, 3, 1, 56),
}  # fmt: skip


def main() -> int:
    return convolution_case_command(
        __doc__, CASES, ("ROW_TILE_TASKS", False), "row_tile_tasks.jsonl"
    )


if __name__ == "__main__":
    sys.exit(main())
