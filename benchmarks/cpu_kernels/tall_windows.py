"""Convolutions whose windows are many rows tall: the channel tile's input padded once in a pass
of its own (``conv.CHANNEL_TILE_COPY_OVERLAP``) against in each task, the rows that task reads
(before), beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/tall_windows.py [--runs 30] [--only CASE ...]

A channel-vectorized tile's task (a row of output positions, a block of output channels) pads
the input rows it reads (``conv.CHANNEL_TILE_COPIES_IN_TASK``); with a 7x1 window that is seven
input rows of every channel for one row of output, and every block of output channels copies
them again: Inception-v3's 7x1 layers ran 1.2-1.3x ONNX Runtime's time where its 1x7 layers of
the same sizes ran level. Now a tile whose task reads more than three input rows for each it
advances over pads the whole input once, before the tasks. Cases: Inception-v3's 7x1 layers
over 17 x 17 and its 5x5 of 48 -> 64 over 35 x 35 (5 rows for 1: a pass too), and controls the
change leaves as they were (3x3 windows, 1x7). Each with ReLU after it, exported to ONNX (batch
1), compiled for the whole CPU both ways, run end to end by our executor beside ONNX Runtime on
the same cores and threads in 5 interleaved rounds (medians); outputs checked against ONNX
Runtime's. One JSON line per case in ``benchmarks/results/tall_windows.jsonl``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_switch, square_conv_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, padding, map side)
    "7x1 192 @17": (192, 192, (7, 1), (3, 0), 17),
    "7x1 160 -> 192 @17": (160, 192, (7, 1), (3, 0), 17),
    "7x1 128 @17": (128, 128, (7, 1), (3, 0), 17),
    "5x5 48 -> 64 @35": (48, 64, (5, 5), (2, 2), 35),
    "1x7 192 @17": (192, 192, (1, 7), (0, 3), 17),
    "3x3 256 @14": (256, 256, (3, 3), (1, 1), 14),
    "3x3 512 @7": (512, 512, (3, 3), (1, 1), 7),
}


def main() -> int:
    off = module_switch("tvm_hetero.schedules.cpu.conv", "CHANNEL_TILE_COPY_OVERLAP", math.inf)
    return square_conv_case_command(__doc__, CASES, off, "tall_windows.jsonl")


if __name__ == "__main__":
    sys.exit(main())
