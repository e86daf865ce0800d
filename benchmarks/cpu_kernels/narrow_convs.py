"""Convolutions with output rows of 1-4 columns: the convolution rule against the reduction rule
that took them before (rows under 4 columns), and ONNX Runtime.

    .venv/bin/python benchmarks/cpu_kernels/narrow_convs.py [--threads 1]

Such rows are ResNet's last stages at 64 pixels (2 x 2 and 4 x 4 maps of 256-2048 channels)
and FlexPie's tiles cut by columns (ResNet-18's 7-column map over 4 devices: 1-2 columns each,
with the halo). Each convolution (with its ReLU) is legalized and scheduled by the first CPU
rule that takes it, once as the rules stand and once with the convolution rule declining rows
under 4 columns (``before``: the reduction rule, accumulating in memory), for this host's CPU
(``mcpu``) and for generic x86-64 (no CPU named, as FlexPie's emulated devices were built),
``--threads`` cores; the kernel alone is timed (``time_evaluator``, the median of 5 repeats of
10 calls) and checked equal to ``before``'s. ONNX Runtime runs the same convolution as a
one-node ONNX file with the same threads. Results: ``benchmarks/results/narrow_convs.json``.
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


def kernel(x_shape, w_shape, stride, pad, target, before: bool):
    """The scheduled ``relu(conv2d)`` kernel, compiled, and the rule that took it."""
    import tvm
    from tvm import relax

    from tvm_hetero._compat import PrimFunc
    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import conv, cpu_rules

    groups = x_shape[1] if w_shape[1] == 1 else 1
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.Var("w", relax.TensorType(w_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, w, strides=stride, padding=pad, groups=groups)
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    mod = relax.transform.FuseTIR()(
        relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
    )
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    rules = cpu_rules()
    if before:
        for rule in rules:
            if isinstance(rule, conv.Conv):
                rule.min_width = conv.MIN_WIDTH
    sch, rule = first_schedule(func, target, rules)
    prim = sch.mod["main"].with_attr("global_symbol", "k")
    lib = tvm.compile(tvm.IRModule({"k": prim}), target)
    return getattr(lib, "mod", lib), prim, rule


def timed(lib, prim) -> tuple[float, np.ndarray]:
    """Microseconds of one call and the output."""
    import tvm

    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in p.shape] for p in prim.params]
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in shapes]
    us = lib.time_evaluator("k", tvm.cpu(), number=10, repeat=5)(*args).median * 1e6
    return us, args[-1].numpy()


def main() -> None:
    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.worker import use_threads

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(HERE.parent / "results" / "narrow_convs.json"))
    args = parser.parse_args()
    use_threads(args.threads)
    targets = {
        "host": cpu_device(threads=args.threads).target,
        "generic": {"kind": "llvm", "num-cores": args.threads},
    }
    rows = []
    print(f"{'convolution':>28} {'target':>7} {'before us':>9} {'now us':>7} {'x':>5} "
          f"{'GF/s':>5} {'/ ORT':>5}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x_shape, w_shape, stride, pad) in CONVS.items():
            path = Path(tmp) / "conv.onnx"
            groups = x_shape[1] if w_shape[1] == 1 else 1
            onnx.save(conv_onnx(x_shape, w_shape, (stride,) * 2, (pad,) * 4, groups), path)
            feeds = {"x": np.random.default_rng(0).standard_normal(x_shape).astype("float32")}
            ort_us = ort_seconds(path, feeds, args.threads, repeat=50)[0] * 1e6
            for label in TARGETS:
                target = make_target(targets[label])
                old_us, old_y = timed(*kernel(x_shape, w_shape, stride, pad, target, True)[:2])
                lib, prim, rule = kernel(x_shape, w_shape, stride, pad, target, False)
                us, y = timed(lib, prim)
                gflop = 2 * y.size * np.prod(w_shape[1:]) / 1e9
                rows.append({"conv": name, "target": label, "output": list(y.shape),
                             "before_us": old_us, "us": us, "rule": rule, "ort_us": ort_us,
                             "max_abs_diff": float(np.abs(y - old_y).max())})  # fmt: skip
                print(f"{name:>28} {label:>7} {old_us:>9.0f} {us:>7.0f} {old_us / us:>5.1f} "
                      f"{gflop / us * 1e6:>5.1f} {us / ort_us:>5.2f}", flush=True)  # fmt: skip
    Path(args.out).write_text(json.dumps({"threads": args.threads, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
