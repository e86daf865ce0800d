"""1-D convolutions and pools, and a grouped convolution, on one CPU against ONNX Runtime
(issue 56), with and without ``Conv1dAsMatmul`` and ``GroupedConvolutionsByGroup``.

    .venv/bin/python benchmarks/cpu_kernels/convolutions_1d.py [--runs 50]

Each case is a PyTorch module exported to ONNX (random input, batch 1): a wav2vec2-style audio
front end (a 10-tap, stride-5 convolution to 512 channels over 16,000 samples, GroupNorm,
GELU, then four 3-tap and two 2-tap stride-2 convolutions of 512 channels), one 3-tap
stride-2 convolution of 512 channels over 1,600 samples, a 1-D max pool, wav2vec 2.0's
positional convolution (768 channels in 16 groups, 128 taps, over the 49 frames of one
second), and a 3x3 convolution of 256 channels in 32 groups. Compiled for the whole CPU (``cpu``, every core) with
the passes (``now``) and without them (``before``), each in a process of its own, timed end to
end by our executor in 5 interleaved rounds beside ONNX Runtime on the same cores and
threads; outputs checked against ONNX Runtime's. One JSON line per case and build in
``benchmarks/results/convolutions_1d.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT / "benchmarks")]
from onnx_models import append_rows, export_case  # noqa: E402
from stamp import stamp  # noqa: E402


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
    "conv1d 768, 128 taps, 16 groups, 49 (wav2vec 2.0's positions)": (
        lambda: nn.Conv1d(768, 768, 128, padding=64, groups=16), (1, 768, 49)),
    "conv2d 3x3, 256 in 32 groups, 28x28": (
        lambda: nn.Conv2d(256, 256, 3, 1, 1, groups=32), (1, 256, 28, 28)),
}  # fmt: skip


def exported(name: str, work: Path) -> tuple[Path, np.ndarray]:
    """The case as an ONNX file in ``work`` and its input."""
    path = work / f"{abs(hash(name))}.onnx"
    return path, export_case(*CASES[name], path)


def measure(name: str, label: str, runs: int) -> dict:
    """One case built ``now`` (with the passes) or ``before`` (without), timed beside ONNX
    Runtime: its row."""
    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer
    from tvm_hetero.passes import conv1d_as_matmul, grouped_convolutions_by_group
    from tvm_hetero.runtime.executor import interleaved_run_seconds
    from tvm_hetero.runtime.onnx_session import session_options

    device = resolve_device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        path, x = exported(name, Path(tmp))
        (want,) = ort.InferenceSession(str(path), session_options()).run(None, {"x": x})
        if label == "before":  # neither pass rewrites anything
            conv1d_as_matmul.rewritten = lambda call, mod: False
            grouped_convolutions_by_group.rewritten = lambda call, mod: False
        build = api.compile(load_model(str(path)), [device])
        (got,) = api.run(build, {"x": x})
        peer = OnnxRuntimePeer(path, device, [x])
        ours, theirs = interleaved_run_seconds([build.deployment], [runs], peers=[peer])
        peer.close()
    return {"case": name, "build": label, "threads": device.threads,
            "ours_ms": 1e3 * float(np.median(ours)), "ort_ms": 1e3 * float(np.median(theirs)),
            "rel_error": float(np.abs(got - want).max() / np.abs(want).max())}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one measurement, in this process
    parser.add_argument("--build", choices=("now", "before"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(measure(args.case, args.build, args.runs)))
        return 0
    stamped = stamp()
    rows = []
    for name in CASES:
        for label in ("now", "before"):  # each in a process of its own: timed after other
            # cases in one process, a grouped convolution took 7.9 ms that takes 1.25 alone
            done = subprocess.run(
                [sys.executable, __file__, "--runs", str(args.runs), "--case", name,
                 "--build", label], capture_output=True, text=True, check=True,
            )  # fmt: skip
            row = {**json.loads(done.stdout.strip().splitlines()[-1]), **stamped}
            rows.append(row)
            print(
                f"{name:37} {label:6} ours {row['ours_ms']:8.3f} ms  ORT {row['ort_ms']:7.3f}"
                f"  {row['ours_ms'] / row['ort_ms']:5.2f}x  err {row['rel_error']:.0e}"
            )
    append_rows(rows, "convolutions_1d.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
