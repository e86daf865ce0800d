"""Bilinear resizes on one CPU: TVM's kernel, ``SeparableResize``'s two passes, and ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/resize.py [--runs 30] [--only CASE ...]

Each case is ``F.interpolate(x, size, mode="bilinear")`` exported to ONNX (batch 1): the
upsamples of LR-ASPP's and SegFormer's heads and one to the input's own size (SegFormer's
finest map). Compiled for the whole CPU with the pass and without it (``before``), run end to
end by our executor beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds
(medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/resize.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402


class Upsample(torch.nn.Module):
    def __init__(self, size: tuple[int, int]) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, size=self.size, mode="bilinear")


CASES = {  # name: (output size, input shape)
    "21 @64 -> 512": ((512, 512), (1, 21, 64, 64)),
    "128 @32 -> 64": ((64, 64), (1, 128, 32, 32)),
    "256 @16 -> 128": ((128, 128), (1, 256, 16, 16)),
    "256 @128 -> 128": ((128, 128), (1, 256, 128, 128)),
}


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.passes import separable_resize

        return (separable_resize, "rewritten", lambda *_: False)

    def export(case, path):
        return export_case(lambda size=case[0]: Upsample(size), case[1], path)

    return case_command(__doc__, CASES, export, off, "resize.jsonl")


if __name__ == "__main__":
    sys.exit(main())
