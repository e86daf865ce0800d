"""Convolutions with rows of 1-5 columns: the convolution rule's width-vectorized tile against its
channel-vectorized one (weights packed by output channel at build time), and ONNX Runtime.

    .venv/bin/python benchmarks/cpu_kernels/channel_vectors.py [--threads 1]

Such rows are FlexPie's tiles cut by columns or in a grid (ResNet-18's 7-column map over 4
devices: 1-2 columns and the halo) and small maps' last stages. Each ``relu(conv2d)`` is
legalized and scheduled for this host's CPU on ``--threads`` cores three ways: ``width``, as a
build gives it with weights given at run time (``PadConvolutionOutputs`` widens rows of 4 or
more columns to whole vectors: the kernel is timed at that width, as the build runs it);
``channel``, with the weights packed as ``PackConstantWeights`` packs constant ones
(``[O / L, I, KH, KW, L]``) and the rule's channel-vectorized tile; and ONNX Runtime on the
same one-node ONNX file. Times are medians of 5 repeats of 10 calls, the two kernels' outputs
compared on the same inputs. Results: ``benchmarks/results/channel_vectors.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from bench import ort_seconds  # noqa: E402
from conv_kernel import conv_relu_func, kernel_us  # noqa: E402
from onnx_models import conv_onnx  # noqa: E402

CONVS = {  # (x, w): 3x3, stride 1, no padding (a tile with its halo)
    "3x3 512 7x1": ((1, 512, 9, 3), (512, 512, 3, 3)),
    "3x3 512 7x2": ((1, 512, 9, 4), (512, 512, 3, 3)),
    "3x3 512 7x4": ((1, 512, 9, 6), (512, 512, 3, 3)),
    "3x3 256 14x3": ((1, 256, 16, 5), (256, 256, 3, 3)),
    "3x3 256 14x5": ((1, 256, 16, 7), (256, 256, 3, 3)),
    "3x3 128 28x2": ((1, 128, 30, 4), (128, 128, 3, 3)),
    "3x3 64 56x3": ((1, 64, 58, 5), (64, 64, 3, 3)),
}


def width_kernel(x_shape, w_shape, target):
    """The width-vectorized kernel at the width a build computes it (whole vectors from 4
    columns on), and that width."""
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules
    from tvm_hetero.schedules.cpu.common import vector_lanes
    from tvm_hetero.schedules.cpu.conv import vector_width

    out_w = x_shape[3] - w_shape[3] + 1
    wide = vector_width(out_w, vector_lanes(target, 32))[0]
    x_wide = (*x_shape[:3], x_shape[3] + wide - out_w)
    sch, _ = first_schedule(conv_relu_func(x_wide, w_shape, 1, 0), target, cpu_rules())
    return sch.mod["main"], x_wide


def channel_kernel(x_shape, w_shape, target):
    """The channel-vectorized kernel and the packing of its weights."""
    from tvm_hetero.passes.pack_constant_weights import packed_kernel
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules

    packing = packed_kernel(conv_relu_func(x_shape, w_shape, 1, 0).with_attr("target", target))
    sch, _ = first_schedule(packing.kernel, target, cpu_rules())
    return sch.mod["main"], packing.pack


def main() -> None:
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.worker import use_threads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "channel_vectors.json"))
    args = parser.parse_args()
    use_threads(args.threads)
    target = make_target(cpu_device(threads=args.threads).target)
    rng = np.random.default_rng(0)
    rows = []
    print(f"{'convolution':>14} {'width us':>8} {'channel us':>10} {'x':>5} {'GF/s':>5} "
          f"{'ORT us':>7} {'/ ORT':>5}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x_shape, w_shape) in CONVS.items():
            x = rng.standard_normal(x_shape).astype("float32")
            w = rng.standard_normal(w_shape).astype("float32")
            path = Path(tmp) / "conv.onnx"
            onnx.save(conv_onnx(x_shape, w_shape, (1, 1), (0,) * 4, 1), path)
            ort_us = ort_seconds(path, {"x": x}, args.threads, repeat=50)[0] * 1e6
            wide, x_wide = width_kernel(x_shape, w_shape, target)
            x_padded = np.zeros(x_wide, "float32")
            x_padded[..., : x_shape[3]] = x
            width_us, y_wide = kernel_us(wide, target, 10, inputs=[x_padded, w])
            kernel, pack = channel_kernel(x_shape, w_shape, target)
            us, y = kernel_us(kernel, target, 10, inputs=[x, np.ascontiguousarray(pack(w))])
            diff = float(np.abs(y - y_wide[..., : y.shape[3]]).max() / np.abs(y).max())
            gflop = 2 * y.size * np.prod(w_shape[1:]) / 1e9
            rows.append({"conv": name, "output": list(y.shape), "width_us": width_us,
                         "width_computed": x_wide[3] - w_shape[3] + 1, "channel_us": us,
                         "ort_us": ort_us, "max_rel_diff": diff})  # fmt: skip
            print(f"{name:>14} {width_us:>8.0f} {us:>10.0f} {width_us / us:>5.2f} "
                  f"{gflop / us * 1e6:>5.1f} {ort_us:>7.0f} {us / ort_us:>5.2f}", flush=True)  # fmt: skip
    Path(args.out).write_text(
        json.dumps({"threads": args.threads, "cpu": str(target), "rows": rows}, indent=1) + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
