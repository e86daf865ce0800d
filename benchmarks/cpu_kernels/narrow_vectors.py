"""Convolutions over maps 7 or 8 wide with AVX-512: rows in one vector of 16 lanes, or in one of
8 (``conv.NARROWEST_HALVED_LANES``), and ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/narrow_vectors.py [--threads 1] [--rounds 3]

``PadConvolutionOutputs`` computes a row in whole vectors: with 16 lanes a 7-wide row is one
vector with 9 lanes computed for nothing. Now a row of at most half a vector takes vectors half
as wide. Each ``relu(conv2d)`` is padded both ways by the pass, scheduled by the rule and timed
alone (``time_evaluator``), ONNX Runtime on a one-node ONNX file of the same convolution, same
threads, in ``--rounds`` interleaved rounds (medians). Needs an AVX-512 host (16 lanes); on
others both columns are the same kernel. Results: ``benchmarks/results/narrow_vectors.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from conv_kernel import kernel_arguments, timed_convolutions, write_results  # noqa: E402
from conv_rows import paddings, rule_kernel  # noqa: E402

CASES = {  # name: (input, weights, stride, padding): ResNet's last stage, Inception's
    "3x3 512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    "3x3/2 512 @14 -> 7": ((1, 512, 14, 14), (512, 512, 3, 3), 2, 1),
    "1x1/2 1024 -> 2048 @14 -> 7": ((1, 1024, 14, 14), (2048, 1024, 1, 1), 2, 0),
    "3x3/2 192 -> 320 @17 -> 8": ((1, 192, 17, 17), (320, 192, 3, 3), 2, 0),
}


def kernel(x_shape, w_shape, stride: int, pad, target, halved: bool):
    """The rule's kernel, padded by the pass with rows of at most half a vector in vectors half
    as wide (``halved``) or not."""
    from tvm_hetero.schedules.cpu import conv

    kept = conv.NARROWEST_HALVED_LANES
    conv.NARROWEST_HALVED_LANES = kept if halved else 1 << 30
    try:
        padding = paddings(x_shape, w_shape, stride, pad, target)["now"]
    finally:
        conv.NARROWEST_HALVED_LANES = kept
    return padding, rule_kernel(x_shape, w_shape, stride, padding, target, True)


def main() -> None:
    args = kernel_arguments(__doc__.splitlines()[0], "narrow_vectors.json")
    cases = {name: (x, w, stride, pad, 1) for name, (x, w, stride, pad) in CASES.items()}
    paddings_used = {}

    def build(x_shape, w_shape, stride, pad, _groups, target):
        built = {k: kernel(x_shape, w_shape, stride, pad, target, k == "halved")
                 for k in ("whole", "halved")}  # fmt: skip
        paddings_used[x_shape, w_shape] = {k: padding for k, (padding, _) in built.items()}
        return {k: built[k][1] for k in built}

    target, times = timed_convolutions(cases, build, args.threads, args.rounds)
    rows = []
    for name, (x_shape, w_shape, _, _) in CASES.items():
        med, used = times[name], paddings_used[x_shape, w_shape]
        rows.append({"conv": name, "padding_whole": used["whole"], "padding_halved": used["halved"],
                     "whole_us": med["whole"], "halved_us": med["halved"], "ort_us": med["ort"],
                     "samples_us": med["samples_us"]})  # fmt: skip
        r = rows[-1]
        print(f"{name:28} 16 lanes {r['whole_us']:7.0f} us  8 lanes {r['halved_us']:7.0f} us  "
              f"ORT {r['ort_us']:7.0f} us  now / ORT {r['halved_us'] / r['ort_us']:4.2f}x")  # fmt: skip
    write_results(args.out, target, args, rows)


if __name__ == "__main__":
    main()
