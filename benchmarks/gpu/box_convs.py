"""The channel-vectorized convolution tile on the GPU box's Intel AVX-512 CPU: capped at 7
positions of 16 lanes (``conv.CHANNEL_VECTOR_FLOATS``, found on AMD Zen 5) against the 14 it
had before, beside the width-vectorized tile and torch (oneDNN), one thread.

    .venv/bin/python benchmarks/gpu/box_convs.py --export .gpu/c          # here
    python3 benchmarks/gpu/box_convs.py --time .gpu/c --out $OUT/c.json   # on the box

Here: ``channel_vectors.py``'s seven convolutions compiled for the box's CPU (``box.json``:
``skylake-avx512``), one thread, three ways (``width``: the build's width-vectorized kernel at
the width it computes; ``channel``: the rule's tile; ``channel14``: the same rule with the
tile's old cap of 14 positions) into ``DIR/NAME.WAY.so``. The inputs are drawn from a seed on
both sides (their digest, ``digests.json``, is checked on the box: 20 MB of weights a convolution
would not fit the device tool's carry). On the box, with the runtime-only TVM: each kernel loaded
and timed (median of 5 repeats of 10 calls, ``TVM_NUM_THREADS=1``), its output checked against a
numpy convolution's, and torch's ``conv2d`` + ``relu`` on one thread where torch imports.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CONVS = {  # (x, w): 3x3, stride 1, no padding: channel_vectors.py's
    "512_7x1": ((1, 512, 9, 3), (512, 512, 3, 3)),
    "512_7x2": ((1, 512, 9, 4), (512, 512, 3, 3)),
    "512_7x4": ((1, 512, 9, 6), (512, 512, 3, 3)),
    "256_14x3": ((1, 256, 16, 5), (256, 256, 3, 3)),
    "256_14x5": ((1, 256, 16, 7), (256, 256, 3, 3)),
    "128_28x2": ((1, 128, 30, 4), (128, 128, 3, 3)),
    "64_56x3": ((1, 64, 58, 5), (64, 64, 3, 3)),
}
WAYS = ("width", "channel", "channel14")


def numpy_conv_relu(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``relu(conv2d(x, w))``, stride 1, no padding, in float64."""
    _, _, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    y = np.zeros((1, w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            y += np.einsum("ochw,oc->ohw", x[:, :, i : i + oh, j : j + ow], w[:, :, i, j])[None]
    return np.maximum(y, 0)


def inputs(index: int, x_shape, w_shape) -> tuple[np.ndarray, np.ndarray, str]:
    """The ``index``-th convolution's input and weights, drawn from its seed, and their digest."""
    rng = np.random.default_rng(index)
    x = rng.standard_normal(x_shape).astype("float32")
    w = rng.standard_normal(w_shape).astype("float32")
    return x, w, hashlib.sha256(x.tobytes() + w.tobytes()).hexdigest()


def pack_by_output_channel(w: np.ndarray, lanes: int = 16) -> np.ndarray:
    """``[O, I, KH, KW]`` as ``[O / lanes, I, KH, KW, lanes]`` (what ``PackConstantWeights`` does)."""
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // lanes, lanes, i, kh, kw).transpose(0, 2, 3, 4, 1))


def export(out: Path) -> None:
    """Compile every convolution three ways for the box's CPU, with inputs and references."""
    import tvm

    from tvm_hetero._compat import make_target
    from tvm_hetero.schedules.cpu import conv

    sys.path.insert(0, str(HERE.parent / "cpu_kernels"))
    from channel_vectors import channel_kernel, width_kernel

    box = json.loads((HERE / "box.json").read_text())["devices"][0]["target"]
    target = make_target({**box, "num-cores": 1})
    out.mkdir(parents=True, exist_ok=True)
    digests = {}
    for index, (name, (x_shape, w_shape)) in enumerate(CONVS.items()):
        _, w, digests[name] = inputs(index, x_shape, w_shape)
        kernels = {}
        wide, x_wide = width_kernel(x_shape, w_shape, target)
        kernels["width"] = wide
        kernels["channel"], pack = channel_kernel(x_shape, w_shape, target)
        cap = conv.CHANNEL_VECTOR_FLOATS
        conv.CHANNEL_VECTOR_FLOATS = 14 * 16  # the cap before: 14 positions of any lanes
        try:
            kernels["channel14"], _ = channel_kernel(x_shape, w_shape, target)
        finally:
            conv.CHANNEL_VECTOR_FLOATS = cap
        for way, kernel in kernels.items():
            lib = tvm.compile(tvm.IRModule({"k": kernel.with_attr("global_symbol", "k")}), target)
            getattr(lib, "mod", lib).export_library(str(out / f"{name}.{way}.so"))
        assert np.array_equal(pack(w), pack_by_output_channel(w)), "the packing moved"
        (out / f"{name}.width_columns").write_text(str(x_wide[3]))
        print(f"exported {name}", flush=True)
    (out / "digests.json").write_text(json.dumps(digests, indent=1) + "\n")


def torch_us(x: np.ndarray, w: np.ndarray) -> float | None:
    """Microseconds of torch's ``relu(conv2d)`` on one thread (median of 5 x 10), or None."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    with torch.no_grad():
        for _ in range(3):
            torch.relu(torch.nn.functional.conv2d(tx, tw))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(10):
                torch.relu(torch.nn.functional.conv2d(tx, tw))
            times.append((time.perf_counter() - start) / 10)
    return float(np.median(times) * 1e6)


def time_all(folder: Path, out: Path) -> None:
    """Time every exported kernel with the runtime alone and check its output."""
    os.environ["TVM_NUM_THREADS"] = "1"
    import tvm

    digests = json.loads((folder / "digests.json").read_text())
    rows = []
    print(f"{'conv':>9} {'width':>7} {'ch 14':>7} {'ch 7':>7} {'GF/s 7':>6} {'torch':>7}")
    for index, (name, (x_shape, w_shape)) in enumerate(CONVS.items()):
        x, w, digest = inputs(index, x_shape, w_shape)
        if digest != digests[name]:
            raise SystemExit(f"box_convs.py: {name}: this numpy draws other inputs than the export")
        want = numpy_conv_relu(x.astype("float64"), w.astype("float64"))
        x_wide = np.zeros((*x_shape[:3], int((folder / f"{name}.width_columns").read_text())),
                          "float32")  # fmt: skip
        x_wide[..., : x_shape[3]] = x
        row = {"conv": name}
        for way in WAYS:
            lib = tvm.runtime.load_module(str(folder / f"{name}.{way}.so"))
            x_in, w_in = (x_wide, w) if way == "width" else (x, pack_by_output_channel(w))
            y_shape = (*want.shape[:3], x_in.shape[3] - w_shape[3] + 1)
            args = [tvm.runtime.tensor(x_in), tvm.runtime.tensor(w_in),
                    tvm.runtime.tensor(np.zeros(y_shape, "float32"))]  # fmt: skip
            timer = lib.time_evaluator("k", tvm.cpu(), number=10, repeat=5)
            row[f"{way}_us"] = timer(*args).median * 1e6
            y = args[-1].numpy()[..., : want.shape[3]]
            row[f"{way}_rel_err"] = float(np.abs(y - want).max() / np.abs(want).max())
        row["torch_us"] = torch_us(x, w)
        gflop = 2 * want.size * np.prod(w_shape[1:]) / 1e9
        rows.append(row)
        torch_text = f"{row['torch_us']:>7.0f}" if row["torch_us"] else "      -"
        print(f"{name:>9} {row['width_us']:>7.0f} {row['channel14_us']:>7.0f} "
              f"{row['channel_us']:>7.0f} {gflop / row['channel_us'] * 1e6:>6.0f} {torch_text}",
              flush=True)  # fmt: skip
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?"
    )
    out.write_text(json.dumps({"cpu": cpu, "threads": 1, "rows": rows}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, help="compile here into this folder")
    parser.add_argument("--time", type=Path, help="time a folder --export wrote (on the box)")
    parser.add_argument("--out", type=Path, default=Path("box_convs.json"))
    args = parser.parse_args()
    if args.export:
        export(args.export)
    if args.time:
        time_all(args.time, args.out)


if __name__ == "__main__":
    main()
