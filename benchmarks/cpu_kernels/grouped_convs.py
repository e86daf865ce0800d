"""Grouped convolutions whose groups one vector of output channels fills (RegNet-X's groups of
16 with AVX-512, RegNet-Y's 8 in 256-bit vectors): by group (``GroupedConvolutionsByGroup``,
the convolution rule's register tile over a group's channels) or as TOPI's kernel with the
weights packed by channel and the rule's channel-vectorized tile, and ONNX Runtime (issue 56).

    .venv/bin/python benchmarks/cpu_kernels/grouped_convs.py [--threads 2] [--rounds 3]

Each ``relu(conv2d(x, w, groups))`` (RegNet-X 400MF's, 16 input and output channels a group,
and two of RegNet-Y 400MF's, 8) is legalized both ways for the whole CPU, scheduled by the
rules and timed alone (``time_evaluator``), ONNX Runtime on a one-node ONNX file of the same
convolution, same threads, in ``--rounds`` interleaved rounds (medians). On an AVX2 host (8
lanes) the groups of 16 are two vectors each. Results: ``benchmarks/results/grouped_convs.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from conv_kernel import kernel_arguments, timed_convolutions, write_results  # noqa: E402

CASES = {  # name: (input, weights, stride, groups): RegNet-X 400MF's grouped convolutions
    "64 @56 /2, 4 groups": ((1, 64, 56, 56), (64, 16, 3, 3), 2, 4),
    "64 @28, 4 groups": ((1, 64, 28, 28), (64, 16, 3, 3), 1, 4),
    "160 @28 /2, 10 groups": ((1, 160, 28, 28), (160, 16, 3, 3), 2, 10),
    "160 @14, 10 groups": ((1, 160, 14, 14), (160, 16, 3, 3), 1, 10),
    "400 @14 /2, 25 groups": ((1, 400, 14, 14), (400, 16, 3, 3), 2, 25),
    "400 @7, 25 groups": ((1, 400, 7, 7), (400, 16, 3, 3), 1, 25),
    "48 @56, 6 groups of 8": ((1, 48, 56, 56), (48, 8, 3, 3), 1, 6),
    "104 @56 /2, 13 groups of 8": ((1, 104, 56, 56), (104, 8, 3, 3), 2, 13),
}


def kernel(x_shape, w_shape, stride: int, groups: int, target, by_group: bool):
    """The scheduled kernel of ``relu(conv2d)`` with constant weights, by group or by channel
    vectors (as a build makes it: the rewrite, then the weights packed)."""
    from tvm import relax

    from tvm_hetero._compat import PrimFunc, VDevice
    from tvm_hetero.passes import (
        GroupedConvolutionsByGroup,
        PackConstantWeights,
        RestoreKernelTargets,
    )
    from tvm_hetero.passes import grouped_convolutions_by_group as grouping
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules

    vdevice = VDevice(target, 0, "global")
    weights = np.random.default_rng(1).standard_normal(w_shape).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32", vdevice))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(x, relax.const(weights), stride, 1, groups=groups)
            out = bb.emit_output(relax.op.nn.relu(bb.emit(conv)))
        bb.emit_func_output(out)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdevice])
    kept = grouping.channel_vectorized
    grouping.channel_vectorized = (lambda *_: False) if by_group else kept
    try:
        mod = GroupedConvolutionsByGroup()(mod)
    finally:
        grouping.channel_vectorized = kept
    mod = relax.transform.LegalizeOps()(mod)
    mod = relax.transform.FuseTIR()(
        relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
    )
    mod = RestoreKernelTargets()(mod)  # as a build's kernels reach the rules
    mod = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    (conv_kernel,) = [
        f for gv, f in mod.functions_items() if isinstance(f, PrimFunc) and "conv" in gv.name_hint
    ]
    return first_schedule(conv_kernel, target, cpu_rules())[0].mod["main"]


def main() -> None:
    args = kernel_arguments(__doc__.splitlines()[0], "grouped_convs.json", threads=2)
    cases = {name: (x, w, stride, 1, groups) for name, (x, w, stride, groups) in CASES.items()}

    def build(x_shape, w_shape, stride, _pad, groups, target):
        return {k: kernel(x_shape, w_shape, stride, groups, target, k == "by_group")
                for k in ("by_group", "channels")}  # fmt: skip

    target, times = timed_convolutions(cases, build, args.threads, args.rounds)
    rows = []
    for name, med in times.items():
        rows.append({"conv": name, "by_group_us": med["by_group"], "channels_us": med["channels"],
                     "ort_us": med["ort"], "samples_us": med["samples_us"]})  # fmt: skip
        print(f"{name:24} by group {med['by_group']:7.0f} us  channels {med['channels']:7.0f} us"
              f"  ORT {med['ort']:7.0f} us  now / ORT {med['channels'] / med['ort']:4.2f}x")  # fmt: skip
    write_results(args.out, target, args, rows)


if __name__ == "__main__":
    main()
