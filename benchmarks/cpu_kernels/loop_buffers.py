"""Kernels whose buffers are allocated inside a loop on one CPU, with those buffers on the stack
(``StackLoopBuffers``) and in TVM's workspace pool, beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/loop_buffers.py [--runs 30] [--only CASE ...]

TVM keeps a CPU buffer under 1 KiB on the stack and asks the workspace pool for any other where
the buffer is allocated; a buffer computed at each row of a parallel loop was asked for and
freed again at every row. The cases: SegFormer's softmax (16,384 rows of 256: the rows' partial
maxima, 1,024 bytes), Whisper's (6 x 1,500 rows of 1,500: each row's ``exp``, 6,000 bytes),
MobileNet-V2's 3x3 depthwise convolution of 96 channels with stride 2 over 112 x 112 (each
task's padded input), ResNet-50's 3x3 / 2 max pool over 112 x 112 (each task's padded rows),
and a control without such buffers (BERT's softmax, 12 x 128 x 128). Each exported to ONNX,
compiled for the whole CPU with the pass and without it (``before``: TVM's own TIR pipeline),
run end to end by our executor beside ONNX Runtime on the same cores and threads in
interleaved rounds (medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/loop_buffers.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import case_command  # noqa: E402
from onnx_models import export_case  # noqa: E402


class Softmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def _depthwise() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(96, 96, 3, 2, 1, groups=96), torch.nn.ReLU6())


CASES = {  # name: (module factory, input shape)
    "softmax 16384 x 256 (SegFormer)": (Softmax, (1, 1, 16384, 256)),
    "softmax 6 x 1500 x 1500 (Whisper)": (Softmax, (1, 6, 1500, 1500)),
    "depthwise 3x3/2 96 @112": (_depthwise, (1, 96, 112, 112)),
    "max pool 3x3/2 64 @112": (lambda: torch.nn.MaxPool2d(3, 2, 1), (1, 64, 112, 112)),
    "softmax 12 x 128 x 128 (control)": (Softmax, (1, 12, 128, 128)),
}


def main() -> int:
    def off() -> tuple:
        from tvm_hetero.build import multi_device

        return (multi_device, "TIR_PIPELINE", "default")

    def export(case, path):
        return export_case(case[0], case[1], path)

    return case_command(__doc__, CASES, export, off, "loop_buffers.jsonl")


if __name__ == "__main__":
    sys.exit(main())
