"""Max pools on one CPU: TVM's kernel under the pool rule (every window's maximum from a padded
copy, strided windows gathered lane by lane) and the separable one (``LegalizeWithFastMath``:
each input row's window maxima, then down the columns, under the ``separable_pool`` rule),
beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/max_pools.py [--runs 30] [--only CASE ...]

Each case is a ``MaxPool2d`` exported to ONNX (batch 1): the pools of ResNet / DenseNet,
Inception v3, GoogLeNet and SqueezeNet, and four that keep TVM's kernel (output rows under
``SEPARABLE_POOL_MIN_WIDTH``, VGG's 2 x 2 windows: both builds the same, a check on the
noise). Compiled for the
whole CPU with the separable kernel and without it (``before``), run end to end by our
executor beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds
(medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/max_pools.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (channels, input side, window, stride, padding)
    "3x3/2 64 @112 (ResNet)": (64, 112, 3, 2, 1),
    "3x3/2 64 @147 (Inception)": (64, 147, 3, 2, 0),
    "3x3/2 192 @71 (Inception)": (192, 71, 3, 2, 0),
    "3x3/2 96 @109 (SqueezeNet)": (96, 109, 3, 2, 0),
    "3x3/1 288 @35 (Inception)": (288, 35, 3, 1, 1),
    "3x3/1 192 @28 (GoogLeNet)": (192, 28, 3, 1, 1),
    "3x3/2 128 @55 (SqueezeNet 1.1)": (128, 55, 3, 2, 0),
    "3x3/2 288 @35 (Inception)": (288, 35, 3, 2, 0),
    "3x3/2 256 @27 (SqueezeNet)": (256, 27, 3, 2, 0),
    "2x2/2 64 @224 (VGG)": (64, 224, 2, 2, 0),
    "2x2/2 256 @56 (VGG)": (256, 56, 2, 2, 0),
}


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.passes import legalize_with_fast_math as legalize

        return (legalize, "_separable_max_pool", legalize.tvm_legalized)

    def export(case, path):
        channels, side, window, stride, padding = case
        pool = torch.nn.MaxPool2d(window, stride, padding)
        return export_case(lambda: pool, (1, channels, side, side), path)

    return case_command(__doc__, CASES, export, off, "max_pools.jsonl")


if __name__ == "__main__":
    sys.exit(main())
