"""Normalisations over large groups on one CPU (issue 56): our build against ONNX Runtime.

    .venv/bin/python benchmarks/cpu_kernels/norms.py [--runs 100] [--before]

Each case is a PyTorch module exported to ONNX (random input, batch 1): ``GroupNorm`` with one
group (metaformer-style, every element of the map in one mean), with 8 and with 32 groups, and
``InstanceNorm2d``. Compiled for the whole CPU (``cpu``, every core) and timed end to end by our
executor in 5 interleaved rounds beside ONNX Runtime on the same cores and threads; outputs
checked against ONNX Runtime's. ``--before``: also the reduction rule as it was (dlight's alone,
which summed a one-group mean once per element), 3 runs, at 28 x 28 only. One JSON line per case
in ``benchmarks/results/norms.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_models import append_rows, export_case  # noqa: E402

CASES = {  # name: (module, input shape)
    "GroupNorm(1, 64) 56x56": (lambda: torch.nn.GroupNorm(1, 64), (1, 64, 56, 56)),
    "GroupNorm(1, 64) 28x28": (lambda: torch.nn.GroupNorm(1, 64), (1, 64, 28, 28)),
    "GroupNorm(8, 64) 56x56": (lambda: torch.nn.GroupNorm(8, 64), (1, 64, 56, 56)),
    "GroupNorm(32, 256) 28x28": (lambda: torch.nn.GroupNorm(32, 256), (1, 256, 28, 28)),
    "InstanceNorm2d(64) 56x56": (lambda: torch.nn.InstanceNorm2d(64, affine=True),
                                 (1, 64, 56, 56)),
}  # fmt: skip


def exported(name: str, work: Path) -> tuple[Path, np.ndarray]:
    """The case as an ONNX file in ``work`` and its input."""
    path = work / f"{abs(hash(name))}.onnx"
    return path, export_case(*CASES[name], path)


def dlight_reduction() -> None:
    """The reduction rule as it was: dlight's schedule, unchecked."""
    from tvm.s_tir import dlight

    from tvm_hetero.schedules.cpu import reduction

    reduction.Reduction.schedule = lambda self, func, target: dlight.cpu.Reduction().apply(
        func, target, False
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--before", action="store_true")
    args = parser.parse_args()
    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer
    from tvm_hetero.records import cpu_model
    from tvm_hetero.runtime.executor import interleaved_run_seconds
    from tvm_hetero.runtime.onnx_session import session_options

    device = resolve_device("cpu")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            path, x = exported(name, Path(tmp))
            compiled = api.compile(load_model(str(path)), [device])
            (ours,) = api.run(compiled, {"x": x})
            (want,) = ort.InferenceSession(str(path), session_options()).run(None, {"x": x})
            peer = OnnxRuntimePeer(path, device, [x])
            mine, theirs = interleaved_run_seconds([compiled.deployment], [args.runs], peers=[peer])
            row = {"host": cpu_model(), "case": name, "threads": device.threads,
                   "ours_ms": 1e3 * float(np.median(mine)),
                   "ort_ms": 1e3 * float(np.median(theirs)),
                   "max_abs_error": float(np.abs(ours - want).max())}  # fmt: skip
            rows.append(row)
            print(f"{name:26} ours {row['ours_ms']:8.3f} ms  ORT {row['ort_ms']:8.3f} ms  "
                  f"{row['ours_ms'] / row['ort_ms']:5.2f}x  err {row['max_abs_error']:.1e}")  # fmt: skip
        if args.before:
            dlight_reduction()
            name = "GroupNorm(1, 64) 28x28"
            path, x = exported(name, Path(tmp))
            compiled = api.compile(load_model(str(path)), [device])
            (before,) = interleaved_run_seconds([compiled.deployment], [3], rounds=1,
                                                   warmup=1)  # fmt: skip
            row = {"host": cpu_model(), "case": f"{name}, before (dlight alone)",
                   "ours_ms": 1e3 * float(np.median(before))}  # fmt: skip
            rows.append(row)
            print(f"{row['case']}: {row['ours_ms']:.1f} ms")
    append_rows(rows, "norms.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
