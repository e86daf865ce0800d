"""Element-wise kernels that read an input transposed, on one CPU: vectorized along the output's
innermost axis as before, and in square tiles (``schedules/cpu/transposed.py``), beside ONNX
Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/transposes.py [--runs 30] [--only CASE ...]

Each case is exported to ONNX (batch 1): a transformer's tokens laid back out as a map
(``x.transpose(1, 2).reshape(1, C, H, W)``, SegFormer's and the hybrid vision models' step
between attention and convolutions) with a ReLU after it, at SegFormer-B0's stage sizes; the
same with the map concatenated with itself times two (SegFormer's decode head concatenates
such maps: the concatenation rule's pieces); and the other way, a map read as tokens
(``x.flatten(2).transpose(1, 2)``, a patch embedding's step). Compiled for the whole
CPU with the tiles and without them (``before``), run end to end by our executor beside ONNX
Runtime on the same cores and threads, in 5 interleaved rounds (medians); outputs checked
against ONNX Runtime's. One JSON line per case in ``benchmarks/results/transposes.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402

CASES = {  # name: (kind, channels, side)
    "tokens->map 32 @128": ("map", 32, 128),
    "tokens->map 128 @128": ("map", 128, 128),
    "tokens->map 256 @64": ("map", 256, 64),
    "tokens->map 160 @32": ("map", 160, 32),
    "tokens->map x2 256 @64": ("concat", 256, 64),
    "map->tokens 128 @128": ("tokens", 128, 128),
}


class Transpose(torch.nn.Module):
    """One of :data:`CASES`' kinds over ``channels`` x ``side`` x ``side``."""

    def __init__(self, kind: str, channels: int, side: int) -> None:
        super().__init__()
        self.kind, self.channels, self.side = kind, channels, side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "tokens":
            return torch.relu(x.flatten(2).transpose(1, 2))
        y = x.transpose(1, 2).reshape(1, self.channels, self.side, self.side)
        return torch.cat([y, y * 2.0], 1) if self.kind == "concat" else torch.relu(y)


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.schedules.cpu import transposed

        return (transposed, "MIN_TILE_LANES", 1 << 30)

    def export(case, path):
        kind, channels, side = case
        shape = (1, channels, side, side) if kind == "tokens" else (1, side * side, channels)
        return export_case(lambda: Transpose(*case), shape, path)

    return case_command(__doc__, CASES, export, off, "transposes.jsonl")


if __name__ == "__main__":
    sys.exit(main())
