"""CPU kernels side by side: TVM default, tvm-hetero's rules, tuned, ONNX Runtime, numpy (issue 6).

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python benchmarks/cpu_kernels/bench.py [--trials N] [--only ops|models]

Same machine, same thread count (every core, set explicitly for TVM, ONNX Runtime and OpenBLAS),
same ONNX files for TVM and ONNX Runtime: BERT-base's matmul shapes and ResNet-18's convolution
shapes as single-op models, and whole models exported from PyTorch (a 4-layer BERT encoder,
ResNet-18, an MLP). ``--trials N`` also tunes each op / model for N MetaSchedule trials (seeded
with the rules, so tuned is never measured slower than them) and reports the tuning time.
Writes ``benchmarks/results/cpu_kernels.json`` (with ``--only``, the other section is kept; each
section records the command that measured it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count()))  # before numpy loads BLAS, once

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from onnx_models import MODELS, conv_onnx, export_model, matmul_onnx  # noqa: E402

MATMULS = {  # BERT-base, batch 1, sequence 128: (A, B, B is a weight)
    "qkv/out 128x768x768": ((128, 768), (768, 768), True),
    "ffn1 128x768x3072": ((128, 768), (768, 3072), True),
    "ffn2 128x3072x768": ((128, 3072), (3072, 768), True),
    "q@kT 12x128x64x128": ((12, 128, 64), (12, 64, 128), False),
    "att@v 12x128x128x64": ((12, 128, 128), (12, 128, 64), False),
}
CONVS = {  # ResNet-18 at 224x224: (x, w, strides, pads, groups)
    "conv1 7x7/2 3->64 @224": ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3), 1),
    "3x3 64->64 @56": ((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    "3x3/2 64->128 @56": ((1, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1, 1, 1), 1),
    "3x3 128->128 @28": ((1, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    "3x3 256->256 @14": ((1, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    "3x3 512->512 @7": ((1, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    "1x1/2 64->128 @56": ((1, 64, 56, 56), (128, 64, 1, 1), (2, 2), (0, 0, 0, 0), 1),
}


def ort_seconds(
    path: Path, feeds: dict, threads: int, repeat: int = 20
) -> tuple[float, list[np.ndarray]]:
    """ONNX Runtime's median seconds on the same file and inputs, and its outputs."""
    import onnxruntime as ort

    from tvm_hetero.runtime.onnx_session import session_options

    sess = ort.InferenceSession(
        str(path), session_options(threads), providers=["CPUExecutionProvider"]
    )
    return _median(lambda: sess.run(None, feeds), repeat), sess.run(None, feeds)


def _median(fn, repeat: int) -> float:
    fn()
    times = []
    deadline = time.perf_counter() + 20
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline and len(times) >= 3:
            break
    return float(np.median(times))


def tvm_seconds(model, device, options, inputs) -> tuple[float, list[np.ndarray]]:
    from tvm_hetero import api
    from tvm_hetero.runtime.measure import MeasureConfig

    compiled = api.compile(model, [device], options=options)
    outputs = api.run(compiled, inputs)
    config = MeasureConfig(repeat=5, min_repeat_ms=100)
    return api.median_seconds(compiled, inputs, config), outputs


def measure(name, path, device, trials, work_root, extra=None) -> dict:
    """One ONNX file through every path; times in ms."""
    from tvm_hetero import api
    from tvm_hetero.build.multi_device import BuildOptions
    from tvm_hetero.build.tuning import tune
    from tvm_hetero.frontends import load_model

    model = load_model(str(path))
    inputs = model.random_inputs()
    row = {"name": name}
    ref = None
    for mode in ("default", "rules"):
        seconds, out = tvm_seconds(model, device, BuildOptions(mode), inputs)
        row[mode] = seconds * 1e3
        ref = ref if ref is not None else out
        row["max_err_" + mode] = api.max_abs_error(out, ref)
    if trials:
        work = work_root / name.split(" ")[0].replace("/", "_")
        start = time.perf_counter()
        tune(api.place(model, [device], api.Placement((device.name,))), work, trials)
        row["tuning_s"] = time.perf_counter() - start
        options = BuildOptions("metaschedule", str(work))
        seconds, out = tvm_seconds(model, device, options, inputs)
        row["tuned"], row["max_err_tuned"] = seconds * 1e3, api.max_abs_error(out, ref)
        row["trials"] = trials
    feeds = {s.name: inputs[s.name] for s in model.inputs}
    seconds, ort_out = ort_seconds(path, feeds, device.threads)
    row["onnxruntime"] = seconds * 1e3
    scale = max(float(np.abs(o).max()) for o in ort_out) or 1.0
    row["rel_err_vs_ort"] = api.max_abs_error(ref, ort_out) / scale  # TVM against ONNX Runtime
    if extra:
        row.update(extra(inputs))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=0, help="MetaSchedule trials per op/model")
    parser.add_argument("--only", choices=["ops", "models"])
    parser.add_argument("--out", default="benchmarks/results/cpu_kernels.json")
    args = parser.parse_args()

    from tvm_hetero.devices import cpu_device

    device = cpu_device()
    tmp = Path(tempfile.mkdtemp(prefix="cpu_kernels_"))
    work_root = Path("benchmarks/results/tuning/cpu_kernels")
    rows = {"ops": [], "models": []}
    if args.only != "models":
        for name, (a, b, weight) in MATMULS.items():
            path = tmp / f"mm{len(rows['ops'])}.onnx"
            path.write_bytes(matmul_onnx(a, b, weight).SerializeToString())
            rng = np.random.default_rng(0)
            bmat = rng.standard_normal(b).astype("float32")

            def numpy_ms(inputs, bmat=bmat):
                inp = list(inputs.values())
                b_arr = inp[1] if len(inp) > 1 else bmat
                return {"numpy": _median(lambda: np.matmul(inp[0], b_arr), 30) * 1e3}

            rows["ops"].append(
                _report(measure(name, path, device, args.trials, work_root, numpy_ms))
            )
        for name, (x, w, strides, pads, groups) in CONVS.items():
            path = tmp / f"conv{len(rows['ops'])}.onnx"
            path.write_bytes(conv_onnx(x, w, strides, pads, groups).SerializeToString())
            rows["ops"].append(_report(measure(name, path, device, args.trials, work_root)))
    if args.only != "ops":
        for name in MODELS:
            path, _ = export_model(name, tmp)
            rows["models"].append(_report(measure(name, path, device, args.trials, work_root)))
    meta = {
        "cpu": device.target["mcpu"], "threads": device.threads, "trials": args.trials,
        "command": "python benchmarks/cpu_kernels/bench.py " + " ".join(sys.argv[1:]),
    }  # fmt: skip
    _save(Path(args.out), rows, meta, args.only)
    _tables(rows, meta)


def _save(out: Path, rows: dict, meta: dict, only: str | None) -> None:
    """Write ``rows``; with ``--only`` the other section of an existing file is kept."""
    old = json.loads(out.read_text()) if only and out.exists() else {}
    metas = {section: meta for section in rows if only in (None, section)}
    merged = {
        section: rows[section] if section in metas else old.get(section, [])
        for section in ("ops", "models")
    }
    meta_of = {**old.get("meta_of", {}), **metas}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta_of": meta_of, **merged}, indent=1))


def _report(row: dict) -> dict:
    print(json.dumps(row), flush=True)
    return row


def _tables(rows: dict, meta: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    for section, data in rows.items():
        if not data:
            continue
        table = Table(title=f"{section}: ms on {meta['cpu']}, {meta['threads']} threads")
        cols = ["name", "default", "rules", "tuned", "onnxruntime", "numpy"]
        for c in [*cols, "rules/ORT", "tuned/ORT", "rules/numpy", "tuning s", "err vs ORT"]:
            table.add_column(c, justify="right")
        for r in data:
            cells = [r["name"]] + [f"{r[c]:.3f}" if c in r else "-" for c in cols[1:]]
            ratios = [
                r.get(a, 0) / r[b] if a in r and b in r else None
                for a, b in (("rules", "onnxruntime"), ("tuned", "onnxruntime"), ("rules", "numpy"))
            ]
            cells += [f"{x:.2f}x" if x else "-" for x in ratios]
            cells.append(f"{r['tuning_s']:.0f}" if "tuning_s" in r else "-")
            cells.append(f"{r['rel_err_vs_ort']:.1e}" if "rel_err_vs_ort" in r else "-")
            table.add_row(*cells)
        console.print(table)


if __name__ == "__main__":
    main()
