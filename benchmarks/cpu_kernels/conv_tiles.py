"""The convolution rule's register tile and vector width on ResNet-18's 3x3 convolutions
(issue 14: "the plain 3x3 / 1x1 / strided convolutions of ResNets").

    .venv/bin/python benchmarks/cpu_kernels/conv_tiles.py [--threads 2]

Each convolution (with its ReLU) is legalized and scheduled by the CPU convolution rule with
the register tile forced to ``channels x rows x vectors`` (``register_tile`` replaced), at the
output width as it is ("as is": vectors of the width's largest divisor up to 8 lanes) and
computed at whole vectors of 8 (``wide``: more padding on the right, as
``PadConvolutionOutputs`` does). The kernel alone is timed (``time_evaluator``, microseconds,
the median of 5 repeats of 20 calls) and compared with ONNX Runtime running the same
convolution as a one-node ONNX file with the same threads. ``rule`` marks the tile and width
the rule picks now. Then the strided ones and ResNet's 7x7 stem as the rule schedules them,
with their padded input read in place (``_deinterleave`` replaced: every vector a gather) and
laid out by column phase (the rule). Results: ``benchmarks/results/conv_tiles.json``.
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
sys.path.insert(0, str(HERE))

from bench import ort_seconds  # noqa: E402
from conv_kernel import conv_relu_func, kernel_us  # noqa: E402
from onnx_models import conv_onnx  # noqa: E402

CONVS = {  # ResNet-18 at 224x224: (x, w, stride)
    "3x3 64->64 @56": ((1, 64, 56, 56), (64, 64, 3, 3), 1),
    "3x3 128->128 @28": ((1, 128, 28, 28), (128, 128, 3, 3), 1),
    "3x3 256->256 @14": ((1, 256, 14, 14), (256, 256, 3, 3), 1),
    "3x3 512->512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), 1),
    "3x3/2 64->128 @56": ((1, 64, 56, 56), (128, 64, 3, 3), 2),
    "3x3/2 128->256 @28": ((1, 128, 28, 28), (256, 128, 3, 3), 2),
}
STRIDED = {  # (x, w, stride, padding)
    "7x7/2 3->64 @224 (stem)": ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    "3x3/2 64->128 @56": ((1, 64, 56, 56), (128, 64, 3, 3), 2, 1),
    "3x3/2 128->256 @28": ((1, 128, 28, 28), (256, 128, 3, 3), 2, 1),
    "1x1/2 64->128 @56": ((1, 64, 56, 56), (128, 64, 1, 1), 2, 0),
}
TILES = ((8, 1, 1), (4, 2, 1), (4, 1, 2), (4, 1, 4))
"""``(channels, rows, vectors)`` tried (where they divide the map)."""
LANES = 8


def forced_us(
    x_shape, w_shape, stride, right_pad, tile, threads, pad=1, deinterleave=True
) -> float:
    """Microseconds of the rule's kernel for ``relu(conv2d)`` with ``tile`` forced (``None``:
    the rule's own), the input de-interleaved or not."""
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.schedules.cpu import conv

    target = make_target(cpu_device(threads=threads).target)
    func = conv_relu_func(x_shape, w_shape, stride, (pad, pad, pad, right_pad))
    chosen, phases = conv.register_tile, conv._deinterleave
    if tile is not None:
        conv.register_tile = lambda *_args: tile
    if not deinterleave:
        conv._deinterleave = lambda *_args: False
    try:
        kernel = conv.Conv().schedule(func, target).mod["main"]
    finally:
        conv.register_tile, conv._deinterleave = chosen, phases
    return kernel_us(kernel, target)[0]


def main() -> None:
    from tvm_hetero.runtime.worker import use_threads
    from tvm_hetero.schedules.cpu.conv import register_tile, vector_width

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "conv_tiles.json"))
    args = parser.parse_args()
    use_threads(args.threads)
    rows = []
    print(f"{'convolution':>19} {'width':>6} {'tile':>6} {'us':>7} {'/ ORT':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x_shape, w_shape, stride) in CONVS.items():
            path = Path(tmp) / "conv.onnx"
            onnx.save(conv_onnx(x_shape, w_shape, (stride,) * 2, (1, 1, 1, 1), 1), path)
            feeds = {"x": np.random.default_rng(0).standard_normal(x_shape).astype("float32")}
            ort_us = ort_seconds(path, feeds, args.threads, repeat=50)[0] * 1e6
            out_h = out_w = (x_shape[2] + 2 - 3) // stride + 1
            picked_w = vector_width(out_w, LANES)[0]
            for width in sorted({out_w, -(-out_w // LANES) * LANES}):
                vw = max(d for d in range(1, LANES + 1) if width % d == 0)
                picked = register_tile(w_shape[0], out_h, width // vw)  # de-interleaved
                for tile in TILES:
                    c, r, n = tile
                    if w_shape[0] % c or out_h % r or (width // vw) % n:
                        continue
                    us = forced_us(x_shape, w_shape, stride, 1 + stride * (width - out_w),
                                   tile, args.threads)  # fmt: skip
                    rule = width == picked_w and tile == picked
                    rows.append({"conv": name, "width": width, "tile": list(tile), "us": us,
                                 "ort_us": ort_us, "rule": rule})  # fmt: skip
                    print(f"{name:>19} {width:>6} {'x'.join(map(str, tile)):>6} {us:>7.0f} "
                          f"{us / ort_us:>5.2f}x{' <- rule' if rule else ''}", flush=True)  # fmt: skip
    strided = []
    print(f"\n{'strided convolution':>23} {'in place us':>11} {'phases us':>9} {'speed-up':>8}")
    for name, (x_shape, w_shape, stride, pad) in STRIDED.items():
        out_w = (x_shape[3] + 2 * pad - w_shape[3]) // stride + 1
        extra = stride * (vector_width(out_w, LANES)[0] - out_w)
        times = [forced_us(x_shape, w_shape, stride, pad + extra, None, args.threads, pad, d)
                 for d in (False, True)]  # fmt: skip
        strided.append({"conv": name, "in_place_us": times[0], "phases_us": times[1]})
        print(f"{name:>23} {times[0]:>11.0f} {times[1]:>9.0f} {times[0] / times[1]:>7.2f}x")
    command = "benchmarks/cpu_kernels/conv_tiles.py " + " ".join(sys.argv[1:])
    Path(args.out).write_text(json.dumps(
        {"command": command.strip(), "threads": args.threads, "rows": rows,
         "strided": strided}, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
