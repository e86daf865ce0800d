"""3x3 convolutions over maps up to 56 wide with AVX-512: the convolution rule's width-vectorized
tile against its channel-vectorized one (``conv.WIDE_CHANNEL_VECTORS``), and ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/wide_channel_vectors.py [--threads 2] [--rounds 3]

Each ``relu(conv2d)`` (ResNet's, Inception's, a stem) is built as a build makes it both ways:
``width``, padded by ``PadConvolutionOutputs`` and scheduled by the rule with the wide channel
vectors off; ``channels``, its constant weights packed by ``PackConstantWeights``
(``[O / L, I, KH, KW, L]``) and the rule's channel-vectorized tile, where the rule now takes
it (``-``: the case keeps the width tile). Timed alone (``time_evaluator``), ONNX Runtime on a
one-node ONNX file of the same convolution, same threads, in ``--rounds`` interleaved rounds
(medians). On a host without AVX-512 no case is channel-vectorized. Results:
``benchmarks/results/wide_channel_vectors.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from unittest.mock import patch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from conv_kernel import (  # noqa: E402
    conv_relu_func,
    kernel_arguments,
    timed_convolutions,
    write_results,
)
from conv_rows import paddings, rule_kernel  # noqa: E402

CASES = {  # name: (input, weights, stride, padding)
    "3x3 64 @56": ((1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    "3x3 128 @28": ((1, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    "3x3 256 @14": ((1, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    "3x3 512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    "3x3/2 128 -> 256 @28": ((1, 128, 28, 28), (256, 128, 3, 3), 2, 1),
    "3x3/2 256 -> 512 @14": ((1, 256, 14, 14), (512, 256, 3, 3), 2, 1),
    "3x3 96 @35": ((1, 96, 35, 35), (96, 96, 3, 3), 1, 1),
    "5x5 48 -> 64 @35": ((1, 48, 35, 35), (64, 48, 5, 5), 1, 2),
    "7x7/2 3 -> 64 @224 (stem)": ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
}


def width_kernel(x_shape, w_shape, stride: int, pad: int, target):
    """The kernel as a build made it before: padded by the pass, the width-vectorized tile."""
    from tvm_hetero.schedules.cpu import conv

    with patch.object(conv, "WIDE_CHANNEL_VECTORS", (1 << 30, 0)):
        padding = paddings(x_shape, w_shape, stride, pad, target)["now"]
        return rule_kernel(x_shape, w_shape, stride, padding, target, True)


def channel_kernel(x_shape, w_shape, stride: int, pad: int, target):
    """The channel-vectorized kernel where ``PackConstantWeights`` now packs the weights by
    channel, else None."""
    from tvm_hetero.passes.pack_constant_weights import packed_kernel
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules

    func = conv_relu_func(x_shape, w_shape, stride, pad).with_attr("target", target)
    packing = packed_kernel(func)
    if packing is None or packing.suffix != "channels":
        return None
    return first_schedule(packing.kernel, target, cpu_rules())[0].mod["main"]


def width_against_channels(doc: str, results: str, cases: dict, channel_kernel) -> None:
    """Time ``cases`` (``{name: (input, weights, stride, padding)}``) as the width tile
    (:func:`width_kernel`) and, where ``channel_kernel(input, weights, stride, padding,
    target)`` gives one, as the channel tile, beside ONNX Runtime; print and write
    ``results``."""
    args = kernel_arguments(doc.splitlines()[0], results, threads=2)
    convs = {name: (x, w, stride, pad, 1) for name, (x, w, stride, pad) in cases.items()}

    def build(x_shape, w_shape, stride, pad, _groups, target):
        built = {"width": width_kernel(x_shape, w_shape, stride, pad, target)}
        channels = channel_kernel(x_shape, w_shape, stride, pad, target)
        return built if channels is None else {**built, "channels": channels}

    target, times = timed_convolutions(convs, build, args.threads, args.rounds)
    rows = []
    for name, med in times.items():
        now = med.get("channels", med["width"])
        rows.append({"conv": name, "width_us": med["width"], "channels_us": med.get("channels"),
                     "ort_us": med["ort"], "samples_us": med["samples_us"]})  # fmt: skip
        channels = "-" if "channels" not in med else f"{med['channels']:7.0f}"
        print(f"{name:28} width {med['width']:7.0f} us  channels {channels:>7} us  "
              f"ORT {med['ort']:7.0f} us  now / ORT {now / med['ort']:4.2f}x")  # fmt: skip
    write_results(args.out, target, args, rows)


def main() -> None:
    width_against_channels(__doc__, "wide_channel_vectors.json", CASES, channel_kernel)


if __name__ == "__main__":
    main()
