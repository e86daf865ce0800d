"""Convolutions whose register tile was one vector of one row, padded by ``PadConvolutionOutputs``
as it pads them now (issue 56), against the padding it gave before (widths only), and ONNX
Runtime.

    .venv/bin/python benchmarks/cpu_kernels/conv_rows.py [--threads 1] [--rounds 3]

Each ``relu(conv2d)`` had odd rows and an odd number of vectors in its row (the width computed
at whole vectors of 8), or a strided input whose padded width the stride did not divide (read
lane by lane): the rule's register tile was 8 channels x 1 row x 1 vector. Now odd rows are
computed one row taller and the strided input gets a column more (laid out by phase), so the
tile is 4 channels x 2 rows. Both kernels are scheduled by the rule and timed alone
(``time_evaluator``, the median of 5 repeats of 10 calls), ONNX Runtime on the same one-node
ONNX file with the same threads, in ``--rounds`` interleaved rounds (medians). Before, the
rule never cut the reduction; now it cuts it in blocks of channels where a task's input rows
exceed ``conv.SLAB_BYTES`` (the 3x3/2 288 -> 384). GFLOP/s count
the useful work only (the extra rows and columns are not counted). Results:
``benchmarks/results/conv_rows.json``.
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

from conv_kernel import conv_relu_func, interleaved_us  # noqa: E402
from onnx_models import conv_onnx  # noqa: E402
from stamp import stamp  # noqa: E402

CASES = {  # name: (input, weights, stride, padding): Inception v3's, ResNet's last 3x3
    "3x3 512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), 1, 1),
    "3x3 64->96 @35": ((1, 64, 35, 35), (96, 64, 3, 3), 1, 1),
    "3x3 80->192 @71": ((1, 80, 73, 73), (192, 80, 3, 3), 1, 0),
    "3x3 32->64 @147": ((1, 32, 147, 147), (64, 32, 3, 3), 1, 1),
    "3x3/2 288->384 @17": ((1, 288, 35, 35), (384, 288, 3, 3), 2, 0),
    "3x3/2 192->320 @8": ((1, 192, 17, 17), (320, 192, 3, 3), 2, 0),
    "7x1 192 @17": ((1, 192, 17, 17), (192, 192, 7, 1), 1, (3, 0)),
}
LANES = 8


def paddings(x_shape, w_shape, stride: int, padding, target) -> dict[str, tuple]:
    """The convolution's padding before (its width to whole vectors) and as
    ``PadConvolutionOutputs`` pads it now, and the output rows and width it keeps."""
    from tvm import relax

    from tvm_hetero._compat import VDevice
    from tvm_hetero.passes import PadConvolutionOutputs

    vdev = VDevice(target, 0, "global")
    x = relax.Var("x", relax.TensorType(x_shape, "float32", vdev))
    w = relax.Var("w", relax.TensorType(w_shape, "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, w, stride, padding))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    out_h, out_w = (int(d) for d in mod["main"].ret_ty.shape.values[2:])
    now = PadConvolutionOutputs()(mod)["main"].body.blocks[0].bindings[0].value.attrs.padding
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    before = (ph, pw, ph, pw + stride * (-(-out_w // LANES) * LANES - out_w))
    return {"before": before, "now": tuple(int(p) for p in now), "out": (out_h, out_w)}


def rule_kernel(x_shape, w_shape, stride: int, padding: tuple, target, blocks: bool):
    """The rule's kernel of ``relu(conv2d)`` with ``padding``, its reduction cut in blocks of
    channels where the rule cuts it, or never (``blocks`` False: the rule before)."""
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import conv, cpu_rules

    func = conv_relu_func(x_shape, w_shape, stride, padding)
    slab, conv.SLAB_BYTES = conv.SLAB_BYTES, conv.SLAB_BYTES if blocks else float("inf")
    try:
        sch, _ = first_schedule(func, target, cpu_rules())
    finally:
        conv.SLAB_BYTES = slab
    return sch.mod["main"]


def main() -> None:
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.worker import use_threads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "conv_rows.json"))
    args = parser.parse_args()
    use_threads(args.threads)
    target = make_target(cpu_device(threads=args.threads).target)
    rng = np.random.default_rng(0)
    kernels, pads = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x_shape, w_shape, stride, pad) in CASES.items():
            path = Path(tmp) / f"{len(kernels)}.onnx"
            ph, pw = (pad, pad) if isinstance(pad, int) else pad
            onnx.save(conv_onnx(x_shape, w_shape, (stride,) * 2, (ph, pw, ph, pw), 1), path)
            x = rng.standard_normal(x_shape).astype("float32")
            pads[name] = paddings(x_shape, w_shape, stride, pad, target)
            kernels[name] = (path, {"x": x}, {
                k: rule_kernel(x_shape, w_shape, stride, pads[name][k], target, k == "now")
                for k in ("before", "now")
            })  # fmt: skip
        times = interleaved_us(kernels, target, args.threads, args.rounds, number=10, repeat=5)
    rows = []
    for name, (_x, w_shape, _s, _p) in CASES.items():
        out_h, out_w = pads[name]["out"]
        gflop = 2 * w_shape[0] * np.prod(w_shape[1:]) * out_h * out_w / 1e9
        med = {k: statistics.median(v) for k, v in times[name].items()}
        rows.append({
            "conv": name, "output": [out_h, out_w], "padding_before": pads[name]["before"],
            "padding_now": pads[name]["now"], "before_us": med["before"], "now_us": med["now"],
            "ort_us": med["ort"], "before_gflops": gflop / med["before"] * 1e6,
            "now_gflops": gflop / med["now"] * 1e6, "samples_us": times[name],
        })  # fmt: skip
        r = rows[-1]
        print(f"{name:19} before {r['before_us']:7.0f} us  now {r['now_us']:7.0f} us  "
              f"ORT {r['ort_us']:7.0f} us  now / ORT {r['now_us'] / r['ort_us']:4.2f}x")  # fmt: skip
    out = {**stamp(), "threads": args.threads, "rounds": args.rounds, "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
