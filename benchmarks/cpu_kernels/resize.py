"""Bilinear resizes on one CPU: TVM's kernel, ``SeparableResize``'s two passes, and ONNX Runtime
(issue 56).

    .venv/bin/python benchmarks/cpu_kernels/resize.py [--runs 30]

Each case is ``F.interpolate(x, size, mode="bilinear")`` exported to ONNX (batch 1): the
upsamples of LR-ASPP's and SegFormer's heads and one to the input's own size (SegFormer's
finest map). Compiled for the whole CPU with the pass and without it (``before``), run end to
end by our executor beside ONNX Runtime on the same cores and threads, in 5 interleaved rounds
(medians); outputs checked against ONNX Runtime's. One JSON line per case in
``benchmarks/results/resize.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from onnx_models import append_rows, export_case  # noqa: E402
from stamp import stamp  # noqa: E402


class Upsample(torch.nn.Module):
    def __init__(self, size: tuple[int, int]) -> None:
        super().__init__()
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.interpolate(x, size=self.size, mode="bilinear")


CASES = {  # name: (output size, input shape)
    "21 @64 -> 512": ((512, 512), (1, 21, 64, 64)),
    "128 @32 -> 64": ((64, 64), (1, 128, 32, 32)),
    "256 @16 -> 128": ((128, 128), (1, 256, 16, 16)),
    "256 @128 -> 128": ((128, 128), (1, 256, 128, 128)),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer, session_options
    from tvm_hetero.passes import separable_resize
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    device = resolve_device("cpu")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (size, shape) in CASES.items():
            path = Path(tmp) / f"{len(rows)}.onnx"
            x = export_case(lambda size=size: Upsample(size), shape, path)
            now = api.compile(load_model(str(path)), [device])
            kept, separable_resize.rewritten = separable_resize.rewritten, lambda *_: False
            try:
                before = api.compile(load_model(str(path)), [device])
            finally:
                separable_resize.rewritten = kept
            (want,) = ort.InferenceSession(str(path), session_options()).run(None, {"x": x})
            errors = [float(np.abs(api.run(c, {"x": x})[0] - want).max()) for c in (before, now)]
            peer = OnnxRuntimePeer(path, device, [x])
            old, new, theirs = interleaved_run_seconds(
                [before.deployment, now.deployment], [args.runs, args.runs], peers=[peer]
            )
            row = {**stamp(), "case": name, "threads": device.threads,
                   "before_ms": 1e3 * float(np.median(old)), "now_ms": 1e3 * float(np.median(new)),
                   "ort_ms": 1e3 * float(np.median(theirs)), "max_abs_error": max(errors)}  # fmt: skip
            rows.append(row)
            print(f"{name:16} before {row['before_ms']:7.3f} ms  now {row['now_ms']:7.3f} ms  "
                  f"ORT {row['ort_ms']:7.3f} ms  now / ORT {row['now_ms'] / row['ort_ms']:5.2f}x  "
                  f"err {row['max_abs_error']:.1e}")  # fmt: skip
    append_rows(rows, "resize.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
