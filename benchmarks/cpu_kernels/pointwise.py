"""1x1 convolutions (the matmul rule's work) before and after the rule's panel copy and its
8-row tiles on AVX-512, and ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/pointwise.py [--threads 1] [--rounds 3]

A 1x1 convolution reads its image as the matmul rule's ``B``: each output tile runs down a panel
of ``K`` image rows, one channel's map apart. Where the map is a power of two (64 x 64,
128 x 128) those rows fall into a few cache sets and the panel was fetched again from L3 for
every row tile; now the rule copies such a panel once (``matmul._copy_panel``). With AVX-512's
32 vector registers the register tile is 8 rows x 2 vectors where 8 divides the rows, not 4.
"Before" is the rule without both. Each ``relu(conv2d)`` kernel is scheduled by the rule and
timed alone (``time_evaluator``), ONNX Runtime on a one-node ONNX file of the same convolution,
same threads, in ``--rounds`` interleaved rounds (medians). Results:
``benchmarks/results/pointwise.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from conv_kernel import (  # noqa: E402
    conv_relu_func,
    kernel_arguments,
    timed_convolutions,
    write_results,
)

CASES = {  # name: (input, weights): SegFormer's decode head, LR-ASPP's, ResNet-50's, MobileNets'
    "1024->256 @128": ((1, 1024, 128, 128), (256, 1024, 1, 1)),
    "256->256 @64": ((1, 256, 64, 64), (256, 256, 1, 1)),
    "960->160 @32": ((1, 960, 32, 32), (160, 960, 1, 1)),
    "64->256 @56": ((1, 64, 56, 56), (256, 64, 1, 1)),
    "256->64 @56": ((1, 256, 56, 56), (64, 256, 1, 1)),
    "512->128 @28": ((1, 512, 28, 28), (128, 512, 1, 1)),
    "1024->256 @14": ((1, 1024, 14, 14), (256, 1024, 1, 1)),
    "2048->512 @7": ((1, 2048, 7, 7), (512, 2048, 1, 1)),
    "32->16 @112": ((1, 32, 112, 112), (16, 32, 1, 1)),
}


def rule_kernel(x_shape, w_shape, target, now: bool):
    """The rule's kernel of the 1x1 ``relu(conv2d)``: as it is, or (``now`` False) without the
    panel copy and with 4-row tiles."""
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules, matmul

    func = conv_relu_func(x_shape, w_shape, 1, 0)
    kept = matmul._copy_panel, matmul.rows_per_tile
    if not now:
        matmul._copy_panel = lambda *_: None
        matmul.rows_per_tile = lambda _target: matmul.ROWS_PER_TILE
    try:
        sch, rule = first_schedule(func, target, cpu_rules())
    finally:
        matmul._copy_panel, matmul.rows_per_tile = kept
    assert rule == "matmul", rule
    return sch.mod["main"]


def main() -> None:
    args = kernel_arguments(__doc__.splitlines()[0], "pointwise.json")
    cases = {name: (x, w, 1, 0, 1) for name, (x, w) in CASES.items()}

    def build(x_shape, w_shape, _stride, _pad, _groups, target):
        return {k: rule_kernel(x_shape, w_shape, target, k == "now") for k in ("before", "now")}

    target, times = timed_convolutions(cases, build, args.threads, args.rounds)
    rows = []
    for name, (x_shape, w_shape) in CASES.items():
        gflop = 2 * np.prod(w_shape) * x_shape[2] * x_shape[3] / 1e9
        med = times[name]
        rows.append({
            "conv": name, "before_us": med["before"], "now_us": med["now"], "ort_us": med["ort"],
            "now_gflops": gflop / med["now"] * 1e6, "ort_gflops": gflop / med["ort"] * 1e6,
            "samples_us": med["samples_us"],
        })  # fmt: skip
        r = rows[-1]
        print(f"{name:15} before {r['before_us']:8.0f} us  now {r['now_us']:8.0f} us  "
              f"ORT {r['ort_us']:8.0f} us  now / ORT {r['now_us'] / r['ort_us']:4.2f}x")  # fmt: skip
    write_results(args.out, target, args, rows)


if __name__ == "__main__":
    main()
