"""One ``relu(conv2d)`` kernel as the CPU rules see it, compiled and timed alone: what
``conv_tiles.py`` and ``narrow_convs.py`` schedule in their own ways."""

from __future__ import annotations

import time

import numpy as np


def conv_relu_func(x_shape, w_shape, stride, padding, groups: int = 1):  # -> tirx.PrimFunc
    """The fused, legalized ``relu(conv2d(x, w))`` kernel, unscheduled."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    w = relax.Var("w", relax.TensorType(w_shape, "float32"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = relax.op.nn.conv2d(x, w, strides=stride, padding=padding, groups=groups)
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return fused_kernel(bb.get())


def fused_kernel(mod):  # -> tirx.PrimFunc
    """The one kernel of a Relax module ``mod`` once legalized and fused, unscheduled."""
    from tvm import relax

    from tvm_hetero._compat import PrimFunc

    mod = relax.transform.LegalizeOps()(mod)
    mod = relax.transform.FuseTIR()(
        relax.transform.FuseOps()(relax.transform.AnnotateTIROpPattern()(mod))
    )
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, PrimFunc)]
    return func


def kernel_us(
    kernel, target, number: int = 20, repeat: int = 5, inputs: list | None = None
) -> tuple[float, np.ndarray]:
    """Microseconds of one call of the scheduled ``kernel`` built for ``target`` (the median of
    ``repeat`` x ``number``) on ``inputs`` (every argument but the output; random where not
    given), and its output."""
    import tvm

    lib = tvm.compile(tvm.IRModule({"k": kernel.with_attr("global_symbol", "k")}), target)
    lib = getattr(lib, "mod", lib)
    rng = np.random.default_rng(0)
    args = [
        tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.shape]).astype(p.dtype))
        for p in kernel.params
    ]
    for k, value in enumerate(inputs or []):
        args[k] = tvm.runtime.tensor(value)
    us = lib.time_evaluator("k", tvm.cpu(), number=number, repeat=repeat)(*args).median * 1e6
    return us, args[-1].numpy()


PARKED_S = 0.05
"""Seconds :func:`interleaved_us` waits before ONNX Runtime's turn: TVM's pool threads park."""


def interleaved_us(
    kernels: dict, target, threads: int, rounds: int, number: int = 5, repeat: int = 3
) -> dict[str, dict[str, list[float]]]:
    """``{name: (onnx_file, feeds, {label: kernel})}`` timed in ``rounds`` interleaved rounds:
    in each, ONNX Runtime on the file, then each labelled kernel alone (:func:`kernel_us`);
    microseconds, ``{name: {"ort": [a round each], label: [...]}}``. ONNX Runtime starts
    :data:`PARKED_S` after the last kernel and is timed after 30 runs of its own: TVM's pool
    threads spin on their cores for a while after a kernel, and ONNX Runtime's threads sharing
    those cores ran up to 3.5x slower in some rounds (a 3x3 convolution of 64 channels at 56 x
    56: 1.05 or 3.6 ms, Zen 4); straight after the pause, on idle cores, its 0.1 ms
    convolutions ran 1.6x slower than once the cores were busy again."""
    from bench import ort_seconds

    times: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for name, (path, feeds, labelled) in kernels.items():
            row = times.setdefault(name, {"ort": [], **{label: [] for label in labelled}})
            time.sleep(PARKED_S)
            ort_seconds(path, feeds, threads, repeat=30)  # the cores busy again
            row["ort"].append(ort_seconds(path, feeds, threads, repeat=10)[0] * 1e6)
            for label, kernel in labelled.items():
                row[label].append(kernel_us(kernel, target, number, repeat)[0])
    return times


def kernel_arguments(description: str, results: str, threads: int = 1):  # -> argparse.Namespace
    """``--threads``, ``--rounds`` and ``--out`` (default ``benchmarks/results/<results>``) of a
    script that times kernels two ways beside ONNX Runtime."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--rounds", type=int, default=3)
    default = Path(__file__).resolve().parents[1] / "results" / results
    parser.add_argument("--out", default=str(default))
    return parser.parse_args()


def timed_convolutions(cases: dict, build, threads: int, rounds: int) -> tuple:
    """``cases`` (``{name: (input, weights, stride, padding, groups)}``; the padding one number
    or rows and columns), each built by
    ``build(input, weights, stride, padding, groups, target)`` into ``{label: kernel}`` for this
    CPU on ``threads`` threads and timed by :func:`interleaved_us` beside ONNX Runtime on a
    one-node ONNX file of the same convolution: the target and, per case, each label's median
    microseconds (``ort`` too) and ``samples_us``."""
    import statistics
    import tempfile
    from pathlib import Path

    import onnx
    from onnx_models import conv_onnx

    from tvm_hetero._compat import make_target
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.worker import use_threads

    use_threads(threads)
    target = make_target(cpu_device(threads=threads).target)
    rng = np.random.default_rng(0)
    kernels = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x_shape, w_shape, stride, pad, groups) in cases.items():
            path = Path(tmp) / f"{len(kernels)}.onnx"
            ph, pw = (pad, pad) if isinstance(pad, int) else pad
            onnx.save(conv_onnx(x_shape, w_shape, (stride,) * 2, (ph, pw, ph, pw), groups), path)
            x = rng.standard_normal(x_shape).astype("float32")
            built = build(x_shape, w_shape, stride, pad, groups, target)
            kernels[name] = (path, {"x": x}, built)
        times = interleaved_us(kernels, target, threads, rounds)
    return target, {
        name: {**{k: statistics.median(v) for k, v in row.items()}, "samples_us": row}
        for name, row in times.items()
    }


def write_results(path: str, target, args, rows: list[dict]) -> None:
    """The rows of a kernel script with the host, threads, rounds and target, as JSON."""
    import json
    from pathlib import Path

    from stamp import stamp

    out = {**stamp(), "threads": args.threads, "rounds": args.rounds,
           "target": str(target.attrs.get("mcpu", "")), "rows": rows}  # fmt: skip
    Path(path).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
