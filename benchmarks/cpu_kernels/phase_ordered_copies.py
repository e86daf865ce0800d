"""The copy that lays a strided convolution's input out by column phase, iterated in the layout
it writes (vectorized) or in the input's (a scalar loop) as before, beside ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/phase_ordered_copies.py [--runs 30]
        [--only CASE ...]

A convolution with a column stride of 2 over a map too wide for the channel-vectorized tile
reads its padded input from a copy laid out by column phase (``conv._deinterleave``), so a
vector of outputs reads consecutive addresses. The copy iterated in the input's order: a scalar
loop writing every other element, a branch for the padding each. It now iterates in the layout
it writes, each phase's columns one vector (``conv.PHASE_ORDERED_COPY``). Where the input has
three channels (the stems of mobile networks and ResNets) the copy is a large share of the
layer; the last case, 64 -> 128 channels, is a control. Each case a convolution with ReLU
after it, exported to ONNX (batch 1), compiled for the whole CPU with the change and without
it, run end to end by our executor beside ONNX Runtime on the same cores and threads in
interleaved rounds (medians); outputs checked against ONNX Runtime's. Results:
``benchmarks/results/phase_ordered_copies.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import convolution_case_command  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, map side)
    "3x3/2 3->32 @224 (MobileNet-V2)": (3, 32, 3, 2, 224),
    "3x3/2 3->16 @224 (MobileNet-V3)": (3, 16, 3, 2, 224),
    "3x3/2 3->24 @224 (ShuffleNet-V2)": (3, 24, 3, 2, 224),
    "7x7/2 3->64 @224 (ResNet)": (3, 64, 7, 2, 224),
    "3x3/2 64->128 @112": (64, 128, 3, 2, 112),
}  # fmt: skip


def main() -> int:
    return convolution_case_command(
        __doc__, CASES, ("PHASE_ORDERED_COPY", False), "phase_ordered_copies.jsonl"
    )


if __name__ == "__main__":
    sys.exit(main())
