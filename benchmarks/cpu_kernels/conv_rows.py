"""Odd output rows computed one row taller (``PadConvolutionOutputs``, issue 56): the convolution
rule's kernel at the rows as they are against one row more, and ONNX Runtime.

    .venv/bin/python benchmarks/cpu_kernels/conv_rows.py [--threads 1] [--rounds 3]

Each ``relu(conv2d)`` (3x3, stride 1) has odd rows and an odd number of vectors in its row (the
width as the pass computes it: whole vectors of 8), where the rule's register tile was one
vector of one row (8 channels x 1 x 1); computed one row taller it is 4 channels x 2 rows. Both
kernels are scheduled by the rule and timed alone (``time_evaluator``, the median of 5 repeats
of 10 calls), ONNX Runtime on the same one-node ONNX file with the same threads, in
``--rounds`` interleaved rounds (medians). GFLOP/s count the useful work only (the extra row
and columns are not counted). Results: ``benchmarks/results/conv_rows.json``.
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

from bench import ort_seconds  # noqa: E402
from conv_kernel import conv_relu_func, kernel_us  # noqa: E402
from onnx_models import conv_onnx  # noqa: E402
from stamp import stamp  # noqa: E402

CASES = {  # name: (input, weights, padding): Inception v3's stem and 35 x 35, ResNet's last
    "3x3 512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), 1),
    "3x3 64->96 @35": ((1, 64, 35, 35), (96, 64, 3, 3), 1),
    "3x3 80->192 @71": ((1, 80, 73, 73), (192, 80, 3, 3), 0),
    "3x3 32->64 @147": ((1, 32, 147, 147), (64, 32, 3, 3), 1),
}
LANES = 8


def rule_kernel(x_shape, w_shape, padding, extra_rows: int, target):
    """The rule's kernel of ``relu(conv2d)`` at whole vectors wide and ``extra_rows`` taller."""
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules

    out_w = x_shape[3] + 2 * padding - w_shape[3] + 1
    wide = -(-out_w // LANES) * LANES
    pads = (padding, padding, padding + extra_rows, padding + wide - out_w)
    sch, _ = first_schedule(conv_relu_func(x_shape, w_shape, 1, pads), target, cpu_rules())
    return sch.mod["main"]


def main() -> None:
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.worker import use_threads
    from tvm_hetero.schedules.cpu.conv import register_tile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "conv_rows.json"))
    args = parser.parse_args()
    use_threads(args.threads)
    target = make_target(cpu_device(threads=args.threads).target)
    rng = np.random.default_rng(0)
    kernels, times = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x_shape, w_shape, pad) in CASES.items():
            path = Path(tmp) / f"{len(kernels)}.onnx"
            onnx.save(conv_onnx(x_shape, w_shape, (1, 1), (pad,) * 4, 1), path)
            x = rng.standard_normal(x_shape).astype("float32")
            kernels[name] = (path, {"x": x}, [rule_kernel(x_shape, w_shape, pad, extra, target)
                                             for extra in (0, 1)])  # fmt: skip
        for _ in range(args.rounds):
            for name, (path, feeds, (as_is, taller)) in kernels.items():
                row = times.setdefault(name, {"ort": [], "as_is": [], "taller": []})
                row["ort"].append(ort_seconds(path, feeds, args.threads, repeat=10)[0] * 1e6)
                row["as_is"].append(kernel_us(as_is, target, 10)[0])
                row["taller"].append(kernel_us(taller, target, 10)[0])
    rows = []
    for name, (x_shape, w_shape, pad) in CASES.items():
        out_h = x_shape[2] + 2 * pad - w_shape[2] + 1
        vectors = -(-(x_shape[3] + 2 * pad - w_shape[3] + 1) // LANES)
        gflop = 2 * w_shape[0] * np.prod(w_shape[1:]) * out_h * out_h / 1e9
        med = {k: statistics.median(v) for k, v in times[name].items()}
        rows.append({
            "conv": name, "rows": out_h, "vectors": vectors,
            "tile_as_is": list(register_tile(w_shape[0], out_h, vectors)),
            "tile_taller": list(register_tile(w_shape[0], out_h + 1, vectors)),
            "as_is_us": med["as_is"], "taller_us": med["taller"], "ort_us": med["ort"],
            "as_is_gflops": gflop / med["as_is"] * 1e6,
            "taller_gflops": gflop / med["taller"] * 1e6, "samples_us": times[name],
        })  # fmt: skip
        r = rows[-1]
        print(f"{name:17} as is {r['as_is_us']:7.0f} us  taller {r['taller_us']:7.0f} us  "
              f"ORT {r['ort_us']:7.0f} us  taller / ORT {r['taller_us'] / r['ort_us']:4.2f}x")  # fmt: skip
    out = {**stamp(), "threads": args.threads, "rounds": args.rounds, "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
