"""1-D convolutions and pools on one CPU against ONNX Runtime (issue 56), with and without
``Conv1dAsMatmul``; a grouped 2-D convolution beside them (no rule of its own yet).

    .venv/bin/python benchmarks/cpu_kernels/convolutions_1d.py [--runs 50]

Each case is a PyTorch module exported to ONNX (random input, batch 1): a wav2vec2-style audio
front end (a 10-tap, stride-5 convolution to 512 channels over 16,000 samples, GroupNorm,
GELU, then four 3-tap and two 2-tap stride-2 convolutions of 512 channels), one 3-tap
stride-2 convolution of 512 channels over 1,600 samples, a 1-D max pool, and a 3x3
convolution of 256 channels in 32 groups. Compiled for the whole CPU (``cpu``, every core) with
the pass (``now``) and without it (``before``), each timed end to end by our executor in 5
interleaved rounds beside ONNX Runtime on the same cores and threads (one build at a time); outputs checked against
ONNX Runtime's. One JSON line per case in ``benchmarks/results/convolutions_1d.jsonl``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_models import append_rows, export_case  # noqa: E402


class AudioFront(nn.Module):
    """wav2vec2's feature encoder (group-norm variant), random weights."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv1d(1, 512, 10, 5, bias=False)
        self.norm = nn.GroupNorm(512, 512)
        self.rest = nn.ModuleList(
            [nn.Conv1d(512, 512, 3, 2, bias=False) for _ in range(4)]
            + [nn.Conv1d(512, 512, 2, 2, bias=False) for _ in range(2)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.norm(self.first(x)))
        for conv in self.rest:
            x = nn.functional.gelu(conv(x))
        return x


CASES = {  # name: (module, input shape)
    "audio front end, 16000 samples": (AudioFront, (1, 1, 16000)),
    "conv1d 512, 3 taps, stride 2, 1600": (
        lambda: nn.Conv1d(512, 512, 3, 2, bias=False), (1, 512, 1600)),
    "max_pool1d 3 / 2, 256 x 4000": (lambda: nn.MaxPool1d(3, 2, 1), (1, 256, 4000)),
    "conv2d 3x3, 256 in 32 groups, 28x28": (
        lambda: nn.Conv2d(256, 256, 3, 1, 1, groups=32), (1, 256, 28, 28)),
}  # fmt: skip


def exported(name: str, work: Path) -> tuple[Path, np.ndarray]:
    """The case as an ONNX file in ``work`` and its input."""
    path = work / f"{abs(hash(name))}.onnx"
    return path, export_case(*CASES[name], path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer
    from tvm_hetero.passes import conv1d_as_matmul
    from tvm_hetero.records import cpu_model
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    device = resolve_device("cpu")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    rewrite = conv1d_as_matmul.rewritten
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            path, x = exported(name, Path(tmp))
            (want,) = ort.InferenceSession(str(path)).run(None, {"x": x})
            builds = {}
            for label, rule in (("now", rewrite), ("before", lambda call, mod: False)):
                conv1d_as_matmul.rewritten = rule
                builds[label] = api.compile(load_model(str(path)), [device])
            conv1d_as_matmul.rewritten = rewrite
            errors = [np.abs(api.run(b, {"x": x})[0] - want).max() for b in builds.values()]
            peer = OnnxRuntimePeer(path, device, [x])
            row = {"host": cpu_model(), "commit": commit, "date": time.strftime("%Y-%m-%d"),
                   "case": name, "threads": device.threads,
                   "rel_error": float(max(errors) / np.abs(want).max())}  # fmt: skip
            for label, build in builds.items():  # one build at a time: two executors side by
                # side slowed one another (the same build timed 0.8 and 4.0 ms)
                ours, theirs = interleaved_run_seconds([build.deployment], [args.runs],
                                                       peers=[peer])  # fmt: skip
                row[f"{label}_ms"] = 1e3 * float(np.median(ours))
                row[f"{label}_ort_ms"] = 1e3 * float(np.median(theirs))
            peer.close()  # an idle session left behind slowed the next cases 2-5x
            rows.append(row)
            print(f"{name:37} now {row['now_ms']:7.3f} ms, ORT {row['now_ort_ms']:7.3f} "
                  f"({row['now_ms'] / row['now_ort_ms']:4.2f}x); before {row['before_ms']:7.3f},"
                  f" ORT {row['before_ort_ms']:7.3f}; err {row['rel_error']:.0e}")  # fmt: skip
    append_rows(rows, "convolutions_1d.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
