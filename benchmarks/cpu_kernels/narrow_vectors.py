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

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from conv_kernel import interleaved_us  # noqa: E402
from conv_rows import paddings, rule_kernel  # noqa: E402
from onnx_models import conv_onnx  # noqa: E402
from stamp import stamp  # noqa: E402

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
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.worker import use_threads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "narrow_vectors.json"))
    args = parser.parse_args()
    use_threads(args.threads)
    target = make_target(cpu_device(threads=args.threads).target)
    rng = np.random.default_rng(0)
    kernels, paddings_used = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x_shape, w_shape, stride, pad) in CASES.items():
            path = Path(tmp) / f"{len(kernels)}.onnx"
            onnx.save(conv_onnx(x_shape, w_shape, (stride,) * 2, (pad,) * 4, 1), path)
            x = rng.standard_normal(x_shape).astype("float32")
            built = {k: kernel(x_shape, w_shape, stride, pad, target, k == "halved")
                     for k in ("whole", "halved")}  # fmt: skip
            paddings_used[name] = {k: padding for k, (padding, _) in built.items()}
            kernels[name] = (path, {"x": x}, {k: built[k][1] for k in built})
        times = interleaved_us(kernels, target, args.threads, args.rounds)
    rows = []
    for name in kernels:
        med = {k: statistics.median(v) for k, v in times[name].items()}
        used = paddings_used[name]
        rows.append({"conv": name, "padding_whole": used["whole"], "padding_halved": used["halved"],
                     "whole_us": med["whole"], "halved_us": med["halved"], "ort_us": med["ort"],
                     "samples_us": times[name]})  # fmt: skip
        r = rows[-1]
        print(f"{name:28} 16 lanes {r['whole_us']:7.0f} us  8 lanes {r['halved_us']:7.0f} us  "
              f"ORT {r['ort_us']:7.0f} us  now / ORT {r['halved_us'] / r['ort_us']:4.2f}x")  # fmt: skip
    out = {**stamp(), "threads": args.threads, "rounds": args.rounds,
           "target": str(target.attrs.get("mcpu", "")), "rows": rows}  # fmt: skip
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
