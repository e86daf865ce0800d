"""Transposed convolutions whose window is their stride on one CPU: TVM's legalization (a
convolution over the input dilated by the stride) and ``TransposedConvolutionsAsPointwise``'
1x1 convolution laid out as the map, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/transposed_convolutions.py [--runs 30] [--only CASE ...]

Each case is a ``ConvTranspose2d`` with a bias (batch 1) exported to ONNX: EoMT's mask head
(1,024 channels, 2 x 2 of stride 2, over 20 x 20), DPT's reassembly of its first two stages
(96 channels 4 x 4 of stride 4 and 192 channels 2 x 2 of stride 2 over 24 x 24), SAM's mask
decoder's upscaling (256 -> 64 over 64 x 64, 64 -> 32 over 128 x 128) and a U-Net's
up-convolution (512 -> 256 over 28 x 28). Compiled for the whole CPU with the pass and without
it (``before``), run end to end by our executor beside ONNX Runtime on the same cores and
threads, in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON
line per case in ``benchmarks/results/transposed_convolutions.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command, module_switch  # noqa: E402

CASES = {  # name: (input channels, output channels, window and stride, map side)
    "1024 -> 1024 2x2/2 @20": (1024, 1024, 2, 20),  # EoMT
    "96 -> 96 4x4/4 @24": (96, 96, 4, 24),  # DPT, stage 1
    "192 -> 192 2x2/2 @24": (192, 192, 2, 24),  # DPT, stage 2
    "256 -> 64 2x2/2 @64": (256, 64, 2, 64),  # SAM's mask decoder
    "64 -> 32 2x2/2 @128": (64, 32, 2, 128),
    "512 -> 256 2x2/2 @28": (512, 256, 2, 28),  # U-Net
}


def _module(inputs: int, outputs: int, window: int, side: int) -> tuple:
    """The case's module builder and its input's shape."""
    return (lambda: torch.nn.ConvTranspose2d(inputs, outputs, window, window)), (
        1, inputs, side, side
    )  # fmt: skip


def main() -> int:
    off = module_switch(
        "tvm_hetero.passes.transposed_convolutions_as_pointwise", "AS_POINTWISE", False
    )
    return module_case_command(__doc__, CASES, _module, off, "transposed_convolutions.jsonl")


if __name__ == "__main__":
    sys.exit(main())
