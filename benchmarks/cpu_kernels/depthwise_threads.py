"""Small depthwise convolutions on both threads (``conv.DEPTHWISE_PARALLEL_MIN_FLOPS``) or on
one, as other convolutions of so few multiply-adds are (before), beside ONNX Runtime (issue
56).

    .venv/bin/python benchmarks/cpu_kernels/depthwise_threads.py [--runs 30] [--only CASE ...]

Each case is one depthwise convolution with 'same' padding and ReLU6 after it, exported to
ONNX (batch 1): layers of MobileNet-V2 and smaller networks under 2^18 multiply-adds (which
had run on one thread), and a larger one (on both threads either way: a check on the noise).
Compiled for the whole CPU both ways, run end to end by our executor beside ONNX Runtime on
the same cores and threads in 5 interleaved rounds (medians); outputs checked against ONNX
Runtime's. One JSON line per case in ``benchmarks/results/depthwise_threads.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import conv_switch, module_case_command  # noqa: E402

CASES = {  # name: (channels, window, stride, input side); multiply-adds in thousands
    "3x3 576 @14 /2 (254k)": (576, 3, 2, 14),
    "3x3 384 @14 /2 (169k)": (384, 3, 2, 14),
    "3x3 144 @28 /2 (254k)": (144, 3, 2, 28),
    "3x3 96 @14 (169k)": (96, 3, 1, 14),
    "3x3 64 @14 (113k)": (64, 3, 1, 14),
    "5x5 32 @14 (157k)": (32, 5, 1, 14),
    "3x3 256 @7 (113k)": (256, 3, 1, 7),
    "3x3 960 @7 (423k, control)": (960, 3, 1, 7),
}


def main() -> int:
    def make(channels: int, window: int, stride: int, side: int) -> tuple:
        def build() -> torch.nn.Module:
            conv = torch.nn.Conv2d(channels, channels, window, stride, window // 2,
                                   groups=channels)  # fmt: skip
            return torch.nn.Sequential(conv, torch.nn.ReLU6())

        return build, (1, channels, side, side)

    off = conv_switch("DEPTHWISE_PARALLEL_MIN_FLOPS", 1 << 18)
    return module_case_command(__doc__, CASES, make, off, "depthwise_threads.jsonl")


if __name__ == "__main__":
    sys.exit(main())
