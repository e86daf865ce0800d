"""1x1 convolutions on one CPU, each layer with a change of the matmul rule's and without it,
beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/pointwise_layers.py
        columns|blocks|groups|wider|panels|widened|tall [--runs 30]

- ``columns``: over small maps (MobileNet-V2's expansions and projections at 14 x 14 and 7 x 7,
  ResNet-50's last stage, RegNet-Y's 14 x 14) the output channels as the rule's columns
  (``PackConstantWeights`` with ``matmul.weights_as_columns``), or the image's positions as
  before. Alone, a layer's weights stay in cache from one run to the next; inside a model they
  do not, and the gain there is larger (the commit that made the change quotes whole models).
  Results: ``benchmarks/results/small_map_pointwise.jsonl``.
- ``blocks``: few input channels over large maps (MobileNet-V2's and EfficientNet-B0's layers at
  112 x 112 and 56 x 56): a row tile over several panels of columns
  (``matmul.panels_per_block``), or one as before. Results:
  ``benchmarks/results/pointwise_blocks.jsonl``.
- ``groups``: few output channels over small maps, their weights as the columns (MnasNet's and
  MobileNet-V2's 576 -> 96 and 480 -> 96 over 14 x 14: three panels for two threads): each
  panel's row tiles cut into groups the threads share (``matmul.row_groups``), or the panels
  alone as before; the last case has an even count of panels already (a control). Results:
  ``benchmarks/results/pointwise_groups.jsonl``.
- ``wider``: maps whose positions make one vector of columns where the output channels make
  two (28 x 28: ResNet-50's, ResNet-D's, DenseNet's, GoogLeNet's and MobileNet-V2's layers),
  the output channels as the columns (``matmul.wider_with_weights``), or the positions as
  before; the last case has too few input channels and keeps the positions (a control).
  Results: ``benchmarks/results/wider_tiles.jsonl``.
- ``panels``: maps as wide as the rule's panels (32 x 32 with AVX-512: LR-ASPP's, SegFormer's
  and the 256-pixel vision models' stages), their image read as it lies (``x[k, j // 32, j %
  32]`` is no panel layout: ``matmul.PANELS_AFTER_DEPTH``) and copied a panel at a time where
  its rows share cache sets, or taken for packed panels and read in place as before; the last
  case (28 x 28) is a control. Results: ``benchmarks/results/panel_layouts.jsonl``.
- ``widened``: output channels the rule takes as its columns that one vector divides and two
  do not (RegNet-X's 400, MobileNet-V3's 240, 336), computed two vectors wide with zero
  channels and cropped (``PadMatmulColumns``, ``two_vector_channels``), or one vector wide as
  before; the last case (80 channels: a fifth more to widen) is a control. Results:
  ``benchmarks/results/widened_channels.jsonl``.
- ``tall``: maps whose positions only a tile of 9 to 14 rows divides (SqueezeNet's 13 x 13:
  169 positions), their output channels as the columns in tiles of 13 positions
  (``matmul.tall_rows``; channels no vector divides widened to two vectors,
  ``pad_matmul_columns.PART_VECTOR_CHANNELS``), or the positions as the columns, padded to 192
  and copied on every call, as before; the last case (14 x 14, tiles of 7) is a control.
  Results: ``benchmarks/results/tall_row_tiles.jsonl``.

Each case is a 1x1 ``Conv2d`` with ReLU6 after it, exported to ONNX (batch 1), compiled for the
whole CPU with the change and without it (``before``), run end to end by our executor beside
ONNX Runtime on the same cores and threads, in 5 interleaved rounds (medians); outputs checked
against ONNX Runtime's. One JSON line per case in the results file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import record_cases  # noqa: E402
from onnx_models import export_case  # noqa: E402

CHANGES = {  # change: ([(input channels, output channels, map side)], results file)
    "columns": (
        [(96, 576, 14), (576, 96, 14), (64, 384, 14), (160, 960, 7), (960, 160, 7),
         (320, 1280, 7), (2048, 512, 7), (208, 208, 14)],
        "small_map_pointwise.jsonl",
    ),
    "blocks": (
        [(16, 96, 112), (32, 16, 112), (24, 144, 56), (32, 192, 56), (16, 64, 112)],
        "pointwise_blocks.jsonl",
    ),
    "groups": (
        [(576, 96, 14), (480, 96, 14), (480, 80, 14), (1152, 160, 7), (960, 320, 7)],
        "pointwise_groups.jsonl",
    ),
    "wider": (
        [(256, 512, 28), (512, 128, 28), (128, 512, 28), (512, 256, 28), (480, 128, 28),
         (192, 64, 28), (192, 32, 28), (32, 192, 28)],
        "wider_tiles.jsonl",
    ),
    "panels": (
        [(960, 160, 32), (672, 160, 32), (960, 128, 32), (160, 960, 32), (128, 512, 32),
         (512, 128, 28)],
        "panel_layouts.jsonl",
    ),
    "widened": (
        [(400, 400, 7), (160, 400, 14), (80, 240, 14), (112, 336, 14), (400, 400, 28),
         (240, 80, 14)],
        "widened_channels.jsonl",
    ),
    "tall": (
        [(512, 1000, 13), (512, 64, 13), (384, 48, 13), (64, 256, 13), (48, 192, 13),
         (512, 1000, 14)],
        "tall_row_tiles.jsonl",
    ),
}  # fmt: skip


def case_name(case: tuple[int, int, int]) -> str:
    """A case as the results and report name it: ``96->576 @14``."""
    inputs, outputs, side = case
    return f"{inputs}->{outputs} @{side}"


def pointwise(inputs: int, outputs: int) -> torch.nn.Module:
    """A 1x1 convolution with ReLU6 after it."""
    return torch.nn.Sequential(torch.nn.Conv2d(inputs, outputs, 1), torch.nn.ReLU6())


def switch(change: str) -> tuple:
    """What ``patch.object`` sets to build a case without ``change``."""
    from tvm_hetero.passes import pack_constant_weights, pad_matmul_columns
    from tvm_hetero.schedules.cpu import matmul

    if change == "columns":
        return (pack_constant_weights, "weights_as_columns", lambda *_: False)
    if change == "groups":
        return (matmul, "row_groups", lambda *_: 1)
    if change == "wider":
        return (matmul, "wider_with_weights", lambda *_: False)
    if change == "panels":
        return (matmul, "PANELS_AFTER_DEPTH", False)
    if change == "widened":
        return (pad_matmul_columns, "WIDE_PANELS", False)
    if change == "tall":
        return (matmul, "TALL_ROW_TILES", False)
    return (matmul, "panels_per_block", lambda *_: 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("change", choices=sorted(CHANGES))
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    cases, results = CHANGES[args.change]
    record_cases(
        {case_name(c): c for c in cases},
        lambda case, path: export_case(
            lambda c=case: pointwise(*c[:2]), (1, case[0], case[2], case[2]), path
        ),
        switch(args.change),
        args.runs,
        results,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
