"""Layers whose weights come from beyond L2 on every run, with each thread asking for its next
panel of weights while it computes the current one (``PrefetchNextPanels``, and
``PrefetchPanelBlocks``' last block asking for the next panel's first) or not (before),
beside ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/next_panels.py [--runs 30] [--only CASE ...]

Each case is a stack of layers exported to ONNX (batch 1) whose weights together are larger
than L2, so that each run reads them from L3 or memory as a model's run does: ConvNeXt-T's
MLP blocks over its last two stages (7 x 7 and 14 x 14 positions, channels last), BERT-base's
feed-forward blocks over 128 tokens, a decoder's over 8 tokens, DeiT-tiny's over 197 tokens
(weights under 768 KiB a layer: each thread a band of tokens over every panel), MnasNet's last 1x1
convolutions over 7 x 7 (their panels summed in blocks of their depth), RegNet-X's 1x1
convolutions of 400 channels over 7 x 7 (13 panels, each panel's 7 row tiles in groups the
threads take one after another: :func:`~tvm_hetero.schedules.cpu.matmul.row_groups`), and a control of one
token (a vector times a matrix: not marked). Compiled for the whole CPU both ways, run end to
end by our executor beside ONNX Runtime on the same cores and threads in 5 interleaved rounds
(medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/next_panels.jsonl``.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from before_and_now import module_case_command, module_switch  # noqa: E402

CASES = {  # name: (kind, positions, widths, blocks)
    "ConvNeXt-T 3 MLPs 768-3072 @7x7": ("mlp", 49, (768, 3072), 3),
    "ConvNeXt-T 3 MLPs 384-1536 @14x14": ("mlp", 196, (384, 1536), 3),
    "BERT-base 2 FFNs 768-3072 x 128": ("mlp", 128, (768, 3072), 2),
    "decoder 2 MLPs 1024-4096 x 8": ("mlp", 8, (1024, 4096), 2),
    "DeiT-tiny 4 MLPs 192-768 x 197 (bands)": ("mlp", 197, (192, 768), 4),
    "MnasNet 1x1 1152-192-1152-320 @7x7": ("pointwise", 7, (1152, 192, 1152, 320), 1),
    "RegNet-X 4 x 1x1 400-400 @7x7 (groups)": ("pointwise", 7, (400,) * 5, 1),
    "one token 2 MLPs 768-3072 (control)": ("mlp", 1, (768, 3072), 2),
}


def main() -> int:
    def make(kind: str, positions: int, widths: tuple, blocks: int) -> tuple:
        def build() -> torch.nn.Module:
            if kind == "pointwise":
                pairs = itertools.pairwise(widths)
                return torch.nn.Sequential(
                    *(m for a, b in pairs for m in (torch.nn.Conv2d(a, b, 1), torch.nn.ReLU()))
                )
            width, hidden = widths
            return torch.nn.Sequential(*(
                torch.nn.Sequential(
                    torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width)
                )
                for _ in range(blocks)
            ))  # fmt: skip

        if kind == "pointwise":
            return build, (1, widths[0], positions, positions)
        return build, (1, positions, widths[0])

    def off() -> list[tuple]:
        return [
            module_switch("tvm_hetero.schedules.cpu.matmul", "NEXT_PANELS", False)(),
            module_switch(
                "tvm_hetero.passes.prefetch_panel_blocks", "NEXT_PANEL_AFTER_LAST_BLOCK", False
            )(),
        ]

    return module_case_command(__doc__, CASES, make, off, "next_panels.jsonl")


if __name__ == "__main__":
    sys.exit(main())
