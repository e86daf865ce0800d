"""A depthwise convolution and the 1x1 convolution after it fused into one kernel a band of rows,
against the convolution rule's two kernels, inside an inverted residual block, beside ONNX
Runtime (issue 56; a probe of a rule, not one of the package).

    .venv/bin/python benchmarks/cpu_kernels/depthwise_pointwise.py [--rounds 7] [--runs 40]
        [--only CASE ...]

Each case is MobileNet's inverted residual block without its shortcut: a 1x1 expansion with
ReLU, a depthwise ``K x K`` with ReLU, a 1x1 projection (batch 1), exported to ONNX and compiled
for the whole CPU as ``api.compile`` does. A VM instrument records its kernel calls; they are
replayed in order (each reads what the one before wrote, as in a model), and so is the
expansion's kernel followed by the fused kernel on its output: a TE kernel whose threads each
take a band of output rows, compute the depthwise layer for the band's rows of every channel
into a buffer of their own and the 1x1 layer from it at once (the depthwise output never
leaves the core that wrote it). The two sequences, the expansion alone and ONNX Runtime on the
same file run in interleaved rounds on the same threads (medians); the fused output is checked
against ours. One JSON line a case in ``benchmarks/results/depthwise_pointwise.jsonl``.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from onnx_models import append_rows, export_case  # noqa: E402
from ort_timing import cpu_session, run_ms  # noqa: E402

CASES = {  # name: (input channels, channels, output channels, window, map side)
    "16->32 dw3->16 @112": (16, 32, 16, 3, 112),
    "24->72 dw3->24 @56": (24, 72, 24, 3, 56),
    "24->144 dw3->24 @56": (24, 144, 24, 3, 56),
    "40->240 dw5->40 @28": (40, 240, 40, 5, 28),
}
BAND_ROWS = 4


def block(cin: int, mid: int, out: int, window: int) -> torch.nn.Module:
    """Expansion, depthwise and projection convolutions, ReLU after the first two."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(cin, mid, 1), torch.nn.ReLU(),
        torch.nn.Conv2d(mid, mid, window, 1, window // 2, groups=mid), torch.nn.ReLU(),
        torch.nn.Conv2d(mid, out, 1),
    )  # fmt: skip


def fused_kernel(mid: int, out: int, window: int, side: int, lanes: int, target):
    """The depthwise layer (bias, ReLU) and the 1x1 after it (bias) as one kernel: threads take
    bands of :data:`BAND_ROWS` output rows; a band's depthwise rows of every channel go to a
    buffer under the band loop, the 1x1 reads them in a tile of 8 channels by a vector of
    columns."""
    import tvm
    from tvm import s_tir, te, tirx

    pad = window // 2
    x = te.placeholder((1, mid, side, side), name="x")
    wd, bd = te.placeholder((mid, window, window), name="wd"), te.placeholder((mid,), name="bd")
    wp, bp = te.placeholder((out, mid), name="wp"), te.placeholder((out,), name="bp")
    inside = lambda i, j: tirx.all(i >= pad, i < side + pad, j >= pad, j < side + pad)  # noqa: E731
    padded = te.compute((mid, side + 2 * pad, side + 2 * pad), lambda c, i, j: tirx.if_then_else(
        inside(i, j), x[0, c, i - pad, j - pad], 0.0), name="pad")  # fmt: skip
    kh, kw = te.reduce_axis((0, window), "kh"), te.reduce_axis((0, window), "kw")
    dw = te.compute((mid, side, side), lambda c, i, j: te.sum(
        padded[c, i + kh, j + kw] * wd[c, kh, kw], axis=[kh, kw]), name="dw")  # fmt: skip
    act = te.compute((mid, side, side), lambda c, i, j: te.max(dw[c, i, j] + bd[c], 0.0), "act")
    rc = te.reduce_axis((0, mid), "rc")
    pw = te.compute((1, out, side, side), lambda n, o, i, j: te.sum(
        act[rc, i, j] * wp[o, rc], axis=rc), name="pw")  # fmt: skip
    y = te.compute((1, out, side, side), lambda n, o, i, j: pw[n, o, i, j] + bp[o], name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, wd, bd, wp, bp, y]))
    main = sch.get_sblock("pw")
    _, o, i, j, r = sch.get_loops(main)
    band, row = sch.split(i, [None, BAND_ROWS])
    oo, oi = sch.split(o, [None, 8])
    jo, ji = sch.split(j, [None, lanes])
    sch.reorder(band, oo, row, jo, r, oi, ji)
    sch.parallel(band)
    sch.unroll(oi)
    sch.vectorize(ji)
    acc = sch.cache_write(main, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.reverse_compute_inline(sch.get_sblock("y"))
    sch.vectorize(sch.get_loops(acc)[-1])
    sch.decompose_reduction(main, r)
    for name in ("act", "dw", "pad"):
        sch.compute_at(sch.get_sblock(name), band)
    depth = sch.get_sblock("dw")
    c, i, j, kh, kw = sch.get_loops(depth)[-5:]
    jo, ji = sch.split(j, [None, lanes])
    sch.reorder(c, i, jo, kh, kw, ji)
    sch.unroll(kh)
    sch.unroll(kw)
    sch.vectorize(ji)
    dacc = sch.cache_write(depth, 0, "local")
    sch.reverse_compute_at(dacc, jo)
    sch.vectorize(sch.get_loops(dacc)[-1])
    sch.decompose_reduction(depth, kh)
    for name in ("act", "pad"):
        sch.vectorize(sch.get_loops(sch.get_sblock(name))[-1])
    lib = tvm.compile(sch.mod, target=target)
    return lib["main"]


def measure(case: tuple[int, ...], rounds: int, runs: int) -> dict:
    """Microseconds (medians) of our kernels in order, the expansion then the fused kernel, the
    expansion alone and ONNX Runtime's whole block; the fused output's largest error."""
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.runtime.worker import use_threads

    cin, mid, out, window, side = case
    torch.manual_seed(0)
    net = block(cin, mid, out, window)
    device = resolve_device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "block.onnx"
        x = export_case(lambda: net, (1, cin, side, side), path)
        session = cpu_session(path, device.threads)
        ours = api.compile(load_model(str(path)), [device])
        use_threads(device.threads)
        vm = VirtualMachine(ours.deployment.libraries[0], [tvm.cpu()])
        calls = []

        def instrument(func, symbol, before, _ret, *args) -> int:
            if before and not symbol.startswith("vm."):
                calls.append((func, list(args)))
            return 0

        vm.set_instrument(instrument)
        want = vm["main"](tvm.runtime.tensor(x)).numpy()
        lanes = next(n for n in (16, 14, 8, 7, 4, 2, 1) if side % n == 0)
        fused = fused_kernel(mid, out, window, side, lanes, tvm.target.Target(device.target))
        weights = [net[2].weight.reshape(mid, window, window), net[2].bias,
                   net[4].weight.reshape(out, mid), net[4].bias]  # fmt: skip
        fused_args = [calls[1][1][0]] + [tvm.runtime.tensor(w.detach().numpy()) for w in weights]
        fused_args.append(tvm.runtime.tensor(np.zeros(want.shape, "float32")))
        fused(*fused_args)
        error = float(np.abs(fused_args[-1].numpy() - want).max())
        sequences = {
            "ours": calls,
            "fused": [calls[0], (fused, fused_args)],
            "expansion": calls[:1],
        }
        times: dict[str, list[float]] = collections.defaultdict(list)
        for _ in range(rounds):
            for name, sequence in sequences.items():
                for run in range(runs + 5):
                    start = time.perf_counter()
                    for func, args in sequence:
                        func(*args)
                    if run >= 5:
                        times[name].append((time.perf_counter() - start) * 1e6)
            times["ort"] += [1e3 * t for t in run_ms(session, {"x": x}, runs)]
    median = {name: statistics.median(samples) for name, samples in times.items()}
    return {"threads": device.threads, "kernels": len(calls), "ours_us": median["ours"],
            "fused_us": median["fused"], "expansion_us": median["expansion"],
            "ort_us": median["ort"], "max_abs_error": error}  # fmt: skip


def main() -> int:
    from stamp import stamp

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), metavar="CASE")
    args = parser.parse_args()
    rows = []
    for name, case in CASES.items():
        if args.only and name not in args.only:
            continue
        row = {**stamp(), "case": name, **measure(case, args.rounds, args.runs)}
        rows.append(row)
        rest = row["expansion_us"]
        print(f"{name:20} ours {row['ours_us']:6.0f} us (after the expansion "
              f"{row['ours_us'] - rest:4.0f})  fused {row['fused_us']:6.0f} "
              f"({row['fused_us'] - rest:4.0f})  ORT {row['ort_us']:6.0f}  "
              f"err {row['max_abs_error']:.1e}", flush=True)  # fmt: skip
    append_rows(rows, "depthwise_pointwise.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
