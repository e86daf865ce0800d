"""1x1 convolutions of few input channels over large maps on one CPU: the matmul rule's row
tiles one panel of columns at a time (as before) or several (``matmul.panels_per_block``), and
ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/pointwise_blocks.py [--runs 30]

Each case is a 1x1 ``Conv2d`` with ReLU6 after it, exported to ONNX (batch 1): MobileNet-V2's
and EfficientNet-B0's expansions and projections at 112 x 112 and 56 x 56. Compiled for the whole
CPU with blocks of panels and with one panel a block (``before``), run end to end by our
executor beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds (medians);
outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/pointwise_blocks.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import record_cases  # noqa: E402
from onnx_models import export_case  # noqa: E402
from small_map_pointwise import pointwise  # noqa: E402

CASES = {  # name: (input channels, output channels, map side)
    "16->96 @112": (16, 96, 112),
    "32->16 @112": (32, 16, 112),
    "24->144 @56": (24, 144, 56),
    "32->192 @56": (32, 192, 56),
    "16->64 @112": (16, 64, 112),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    from tvm_hetero.schedules.cpu import matmul

    off = (matmul, "panels_per_block", lambda *_: 1)
    record_cases(
        CASES,
        lambda case, path: export_case(
            lambda c=case: pointwise(*c[:2]), (1, case[0], case[2], case[2]), path
        ),
        off,
        args.runs,
        "pointwise_blocks.jsonl",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
