"""Bilinear grid samples on one CPU: TVM's kernel, ``GridSampleTaps``' taps and gather, and
ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/grid_samples.py [--runs 30] [--only CASE ...]

Each case is ``F.grid_sample(image, 1.1 tanh(points))`` exported to ONNX (zero padding, corners
not aligned: deformable attention's): the image a constant of the case's shape, the points the
input (a tenth of them fall outside the image). Deformable DETR's: its decoder's 300 queries x
4 points over each level's map (8 heads of 32 channels: 28 x 28 to 4 x 4) and its encoder's
1,045 tokens x 4 points; and a dense warp (a 56 x 56 grid over 64 channels, a spatial
transformer's). Compiled for the whole CPU with the pass and without it (``before``), run end
to end by our executor beside ONNX Runtime on the same cores and threads, in 5 interleaved
rounds (medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/grid_samples.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402


class Sample(torch.nn.Module):
    def __init__(self, image: tuple[int, ...]) -> None:
        super().__init__()
        self.image = torch.nn.Parameter(torch.randn(*image))

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        grid = 1.1 * torch.tanh(points)
        return torch.nn.functional.grid_sample(
            self.image, grid, mode="bilinear", padding_mode="zeros", align_corners=False
        )


CASES = {  # name: (image shape, points shape)
    "8 x 32 @28, 300 x 4": ((8, 32, 28, 28), (8, 300, 4, 2)),
    "8 x 32 @7, 300 x 4": ((8, 32, 7, 7), (8, 300, 4, 2)),
    "8 x 32 @28, 1045 x 4": ((8, 32, 28, 28), (8, 1045, 4, 2)),
    "64 @56, 56 x 56": ((1, 64, 56, 56), (1, 56, 56, 2)),
}


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.passes import grid_sample_taps

        return (grid_sample_taps, "rewritten", lambda *_: False)

    def export(case, path):
        return export_case(lambda image=case[0]: Sample(image), case[1], path)

    return case_command(__doc__, CASES, export, off, "grid_samples.jsonl")


if __name__ == "__main__":
    sys.exit(main())
