"""1x1 convolutions over small maps on one CPU: the image's positions as the matmul rule's
columns (as before) or the output channels (``PackConstantWeights`` with
``matmul.weights_as_columns``), and ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/small_map_pointwise.py [--runs 30]

Each case is a 1x1 ``Conv2d`` with ReLU6 after it, exported to ONNX (batch 1): the expansion and
projection layers of MobileNet-V2 at 14 x 14 and 7 x 7, ResNet-50's last stage and RegNet-Y's
14 x 14. Compiled for the whole CPU with the change and without it
(``before``), run end to end by our executor beside ONNX Runtime on the same cores and threads,
in 5 interleaved rounds (medians); outputs checked against ONNX Runtime's. Alone, a layer's
weights stay in cache from one run to the next; inside a model they do not, and the gain there
is larger (the commit that made the change quotes whole models). One JSON line per case in
``benchmarks/results/small_map_pointwise.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import record_cases  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (input channels, output channels, map side)
    "96->576 @14": (96, 576, 14),
    "576->96 @14": (576, 96, 14),
    "64->384 @14": (64, 384, 14),
    "160->960 @7": (160, 960, 7),
    "960->160 @7": (960, 160, 7),
    "320->1280 @7": (320, 1280, 7),
    "2048->512 @7": (2048, 512, 7),
    "208->208 @14": (208, 208, 14),
}


def pointwise(inputs: int, outputs: int) -> torch.nn.Module:
    """A 1x1 convolution with ReLU6 after it."""
    return torch.nn.Sequential(torch.nn.Conv2d(inputs, outputs, 1), torch.nn.ReLU6())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    from tvm_hetero.passes import pack_constant_weights

    off = (pack_constant_weights, "weights_as_columns", lambda *_: False)
    record_cases(
        CASES,
        lambda case, path: export_case(
            lambda c=case: pointwise(*c[:2]), (1, case[0], case[2], case[2]), path
        ),
        off,
        args.runs,
        "small_map_pointwise.jsonl",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
