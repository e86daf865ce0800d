"""Convolutions computed over whole vectors and cropped, their activation folded into the
write-back, with the cropped vector's lanes computed as one vector and stored under a mask
(``GuardedLanesAsMaskedStores``), against the loop LLVM vectorized itself (before), beside ONNX
Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/masked_stores.py [--runs 30] [--only CASE ...]

Each case is one convolution with 'same' padding and an activation after it, exported to ONNX
(batch 1): EfficientNet-B0's depthwise layers with SiLU (maps 112, 56, 28 and 14 wide, which
``PadConvolutionOutputs`` computes 128, 64, 32 and 16 wide), MobileNetV3's with hard-swish,
a dense 3x3 convolution with SiLU, one with ReLU (a cheap epilogue), and a map whose width
the vector divides (no crop: both builds the same, a check on the noise). Compiled for the
whole CPU both ways, run end to end by our executor beside ONNX Runtime on the same cores and
threads in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON
line per case in ``benchmarks/results/masked_stores.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command, module_switch  # noqa: E402

ACTIVATIONS = {"SiLU": torch.nn.SiLU, "hard-swish": torch.nn.Hardswish, "ReLU": torch.nn.ReLU}

CASES = {  # name: (input channels, output channels, window, stride, groups, side, activation)
    "dw 3x3 96 @112 /2 SiLU": (96, 96, 3, 2, 96, 112, "SiLU"),
    "dw 3x3 144 @56 SiLU": (144, 144, 3, 1, 144, 56, "SiLU"),
    "dw 5x5 240 @28 SiLU": (240, 240, 5, 1, 240, 28, "SiLU"),
    "dw 5x5 672 @14 SiLU": (672, 672, 5, 1, 672, 14, "SiLU"),
    "dw 5x5 72 @56 /2 hard-swish": (72, 72, 5, 2, 72, 56, "hard-swish"),
    "dw 5x5 120 @28 hard-swish": (120, 120, 5, 1, 120, 28, "hard-swish"),
    "3x3 64 @56 SiLU": (64, 64, 3, 1, 1, 56, "SiLU"),
    "dw 3x3 144 @56 ReLU": (144, 144, 3, 1, 144, 56, "ReLU"),
    "dw 3x3 144 @64 SiLU (control)": (144, 144, 3, 1, 144, 64, "SiLU"),
}


def main() -> int:
    def make(cin: int, cout: int, window: int, stride: int, groups: int, side: int,
             activation: str) -> tuple:  # fmt: skip
        def build() -> torch.nn.Module:
            conv = torch.nn.Conv2d(cin, cout, window, stride, window // 2, groups=groups)
            return torch.nn.Sequential(conv, ACTIVATIONS[activation]())

        return build, (1, cin, side, side)

    off = module_switch("tvm_hetero.passes.guarded_lanes_as_masked_stores", "MASKED_STORES", False)
    return module_case_command(__doc__, CASES, make, off, "masked_stores.jsonl")


if __name__ == "__main__":
    sys.exit(main())
