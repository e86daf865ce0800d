"""Channel-vectorized convolution tiles along a row (1 x 7 positions) or down a column (7 x 1)
as before, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/channel_tiles_along_rows.py [--runs 30]
        [--only CASE ...]

With AVX-512 the convolution rule computes one-group convolutions over maps up to 56 wide
(ResNet's and Inception's 3x3 and 5x5 layers, the strided ones too) in the channel-vectorized
tile: 7 positions, each two vectors of output channels, one broadcast input element a position
and a step. On a tie of positions it took 7 rows of one column, so each step read 7 rows'
cache lines (14 rows apart with a stride of 2) and the next column's tile read them again from
L2; it now takes 7 columns of one row (``conv.channel_vector_tile(..., wide=True)``), written
back 7 positions a vector. Depthwise convolutions keep the tall tile (up to 1.5x slower wide):
the last case is a control. Whether a 3x3 of stride 1 runs as Winograd's is measured once per
shape with the new tile (``build.conv_choices``); where Winograd's wins, both builds run it.
Each case a convolution with ReLU after it, exported to ONNX (batch 1), compiled for the whole
CPU with the change and without it, run end to end by our executor beside ONNX Runtime on the
same cores and threads in interleaved rounds (medians); outputs checked against ONNX Runtime's.
Results: ``benchmarks/results/channel_tiles_along_rows.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_convolution  # noqa: E402

CASES = {  # name: (input channels, output channels, window, stride, map side, groups)
    "3x3/2 64 @56 (ResNet-18)": (64, 64, 3, 2, 56, 1),
    "3x3/2 128 @56 (ResNet-50)": (128, 128, 3, 2, 56, 1),
    "3x3/2 256 @28 (ResNet-50)": (256, 256, 3, 2, 28, 1),
    "3x3 256 @14 (ResNet-50)": (256, 256, 3, 1, 14, 1),
    "3x3 512 @7 (ResNet-50)": (512, 512, 3, 1, 7, 1),
    "5x5 48->64 @35 (Inception v3)": (48, 64, 5, 1, 35, 1),
    "3x3/2 288->384 @35 (Inception v3)": (288, 384, 3, 2, 35, 1),
    "depthwise 3x3 960 @7 (MobileNet-V2)": (960, 960, 3, 1, 7, 960),
}  # fmt: skip


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import conv

        tall = conv.channel_vector_tile
        return (conv, "channel_vector_tile", lambda rows, width, lanes, wide=False: tall(
            rows, width, lanes))  # fmt: skip

    def export(case, path):
        return export_convolution(path, *case[:5], groups=case[5])

    return case_command(__doc__, CASES, export, off, "channel_tiles_along_rows.jsonl")


if __name__ == "__main__":
    sys.exit(main())
