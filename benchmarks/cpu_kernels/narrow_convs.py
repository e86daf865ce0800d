"""Convolutions with output rows of 1-4 columns: the convolution rule against the reduction rule
that took them before (rows under 4 columns), and ONNX Runtime.

    .venv/bin/python benchmarks/cpu_kernels/narrow_convs.py [--threads 1]
        [--models resnet50 resnet18 ...] [--skip-kernels]

Such rows are ResNet's last stages at 64 pixels (2 x 2 and 4 x 4 maps of 256-2048 channels)
and FlexPie's tiles cut by columns (ResNet-18's 7-column map over 4 devices: 1-2 columns each,
with the halo). Each convolution (with its ReLU) is legalized and scheduled by the first CPU
rule that takes it, once as the rules stand and once with the convolution rule declining rows
under 4 columns (``before``: the reduction rule, accumulating in memory), for this host's CPU
(``mcpu``) and for generic x86-64 (no CPU named, as FlexPie's emulated devices were built),
``--threads`` cores; the kernel alone is timed (``time_evaluator``, the median of 5 repeats of
10 calls) and checked equal to ``before``'s. ONNX Runtime runs the same convolution as a
one-node ONNX file with the same threads. ``--models``: whole models of the corpus
(``benchmarks/models``, torchvision and timm, random weights) at 64 x 64 pixels, where the last
stages are 2 x 2 maps, through ``corpus.check`` (import, compile, match ONNX Runtime, time) on
2 threads, before and now. Results: ``benchmarks/results/narrow_convs.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "models")]

from bench import ort_seconds  # noqa: E402
from conv_kernel import conv_relu_func, kernel_us  # noqa: E402
from onnx_models import conv_onnx  # noqa: E402

CONVS = {  # (x, w, stride, padding)
    "3x3 512 @2x2": ((1, 512, 2, 2), (512, 512, 3, 3), 1, 1),
    "1x1 2048->512 @2x2": ((1, 2048, 2, 2), (512, 2048, 1, 1), 1, 0),
    "1x1 512->2048 @2x2": ((1, 512, 2, 2), (2048, 512, 1, 1), 1, 0),
    "3x3/2 512 @2x2->1x1": ((1, 512, 2, 2), (512, 512, 3, 3), 2, 1),
    "3x3 512 @4x4": ((1, 512, 4, 4), (512, 512, 3, 3), 1, 1),
    "3x3 512 7x1 (column tile)": ((1, 512, 9, 3), (512, 512, 3, 3), 1, 0),
    "3x3 512 7x2 (column tile)": ((1, 512, 9, 4), (512, 512, 3, 3), 1, 0),
    "3x3 256 14x3 (column tile)": ((1, 256, 16, 5), (256, 256, 3, 3), 1, 0),
    "dw 3x3 512 7x2 (column tile)": ((1, 512, 9, 4), (512, 1, 3, 3), 1, 0),
}
TARGETS = ("host", "generic")


@contextlib.contextmanager
def as_before(before: bool = True):
    """With ``before``, the convolution rule declines rows under 4 columns (as it did), for
    every rule set made meanwhile (``api.compile``'s too)."""
    from tvm_hetero.schedules.cpu import conv

    now = conv.Conv.min_width
    conv.Conv.min_width = conv.MIN_WIDTH if before else now
    try:
        yield
    finally:
        conv.Conv.min_width = now


def scheduled(x_shape, w_shape, stride, pad, target, before: bool):
    """The ``relu(conv2d)`` kernel as the first CPU rule that takes it schedules it, and the
    rule (``before``: :func:`as_before`)."""
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules

    groups = x_shape[1] if w_shape[1] == 1 else 1
    func = conv_relu_func(x_shape, w_shape, stride, pad, groups)
    with as_before(before):
        sch, rule = first_schedule(func, target, cpu_rules())
    return sch.mod["main"], rule


def models_before_and_now(names: list[str], work: Path) -> list[dict]:
    """Each corpus model at 64 pixels through ``corpus.check``, before and now."""
    import corpus

    from tvm_hetero.runtime.worker import use_threads

    use_threads(2)  # as ONNX Runtime's session in corpus.check
    rows = []
    print(
        f"{'model @64':>16} {'before ms':>9} {'now ms':>7} {'ORT ms':>7} {'/ ORT':>11} {'err':>7}"
    )
    for name in names:
        checked = {}
        for label in ("before", "now"):
            with as_before(label == "before"):
                checked[label] = corpus.check(name, work, threads=2, rounds=1, small=True)
        before, now = checked["before"], checked["now"]
        rows.append({"model": name, "before": before, "now": now})
        if now["stage"] != "ok" or before["stage"] != "ok":
            print(f"{name:>16} {now['stage']}: {now.get('error', before.get('error', ''))}")
            continue
        print(f"{name:>16} {before['tvm_ms']:>9.2f} {now['tvm_ms']:>7.2f} {now['ort_ms']:>7.2f} "
              f"{before['ratio']:>5.2f}->{now['ratio']:<5.2f} {now['rel_err']:>7.1e}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.worker import use_threads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "narrow_convs.json"))
    parser.add_argument("--models", nargs="*", default=[], help="corpus models, at 64 pixels")
    parser.add_argument("--skip-kernels", action="store_true", help="only --models")
    args = parser.parse_args()
    out = Path(args.out)
    kept = json.loads(out.read_text()) if out.exists() else {}
    targets = {
        "host": cpu_device(threads=args.threads).target,
        "generic": {"kind": "llvm", "num-cores": args.threads},
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.models:
            kept["models"] = models_before_and_now(args.models, Path(tmp))
        use_threads(args.threads)
        if not args.skip_kernels:
            print(f"{'convolution':>28} {'target':>7} {'before us':>9} {'now us':>7} {'x':>5} "
                  f"{'GF/s':>5} {'/ ORT':>5}")  # fmt: skip
        for name, (x_shape, w_shape, stride, pad) in {} if args.skip_kernels else CONVS.items():
            path = Path(tmp) / "conv.onnx"
            groups = x_shape[1] if w_shape[1] == 1 else 1
            onnx.save(conv_onnx(x_shape, w_shape, (stride,) * 2, (pad,) * 4, groups), path)
            feeds = {"x": np.random.default_rng(0).standard_normal(x_shape).astype("float32")}
            ort_us = ort_seconds(path, feeds, args.threads, repeat=50)[0] * 1e6
            for label in TARGETS:
                target = make_target(targets[label])
                old = scheduled(x_shape, w_shape, stride, pad, target, True)[0]
                old_us, old_y = kernel_us(old, target, number=10)
                now, rule = scheduled(x_shape, w_shape, stride, pad, target, False)
                us, y = kernel_us(now, target, number=10)
                gflop = 2 * y.size * np.prod(w_shape[1:]) / 1e9
                rows.append({"conv": name, "target": label, "output": list(y.shape),
                             "before_us": old_us, "us": us, "rule": rule, "ort_us": ort_us,
                             "max_abs_diff": float(np.abs(y - old_y).max())})  # fmt: skip
                print(f"{name:>28} {label:>7} {old_us:>9.0f} {us:>7.0f} {old_us / us:>5.1f} "
                      f"{gflop / us * 1e6:>5.1f} {us / ort_us:>5.2f}", flush=True)  # fmt: skip
    if rows:
        kept |= {"threads": args.threads, "rows": rows}
    out.write_text(json.dumps(kept, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
