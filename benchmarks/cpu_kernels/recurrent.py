"""Recurrent layers as loop kernels against unrolled, beside ONNX Runtime (issue 56, item 2).

    .venv/bin/python benchmarks/cpu_kernels/recurrent.py [--runs 200] [--models NAME ...]

Each model is a PyTorch module exported to ONNX (random weights, batch 1): the zoo's Siamese
LSTM twin (two 2-layer LSTM towers, 64 -> 128, 16 steps), the corpus's LSTM, GRU and
bidirectional LSTM classifiers (embedding 128, 2 layers of 256, 64 tokens), and one LSTM layer
of 512 units over 32 steps. Each is imported twice, ``recurrent="loop"`` (a loop kernel a
direction) and ``"unrolled"`` (a kernel a step and gate), compiled for the whole CPU
(``cpu``, every core), checked against ONNX Runtime, and timed end to end by our executor in 5
interleaved rounds beside ONNX Runtime on the same cores and threads. Compile time is wall
time. One JSON line per model in ``benchmarks/results/recurrent.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT / "benchmarks")]
from onnx_models import append_rows, export_case  # noqa: E402
from stamp import stamp  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks/models"))


class OneLayer(torch.nn.Module):
    """One LSTM layer of 512 units over a (1, 32, 256) input."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.LSTM(256, 512, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


def exported(name: str, work: Path) -> tuple[Path, dict]:
    """The model as an ONNX file in ``work`` and its inputs."""
    path = work / f"{name}.onnx"
    if name == "siamese-lstm":
        from tvm_hetero.zoo.onnx_files import SIAMESE_STEPS, write_onnx

        write_onnx(name, path)
        rng = np.random.default_rng(0)
        shape = (1, SIAMESE_STEPS, 64)
        return path, {k: rng.standard_normal(shape).astype("float32") for k in ("a", "b")}
    if name == "lstm-512":
        return path, {"x": export_case(OneLayer, (1, 32, 256), path)}
    from zoo import CORPUS, export

    names = export(name, path)
    torch.manual_seed(0)
    _, args = CORPUS[name].make(False)
    return path, {n: a.numpy() for n, a in zip(names, args, strict=True)}


MODELS = ("siamese-lstm", "lstm_classifier", "gru_classifier", "bilstm_classifier", "lstm-512")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    args = parser.parse_args()
    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer
    from tvm_hetero.runtime.executor import interleaved_run_seconds
    from tvm_hetero.runtime.onnx_session import session_options

    device = resolve_device("cpu")
    stamped = stamp()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path, feeds = exported(name, Path(tmp))
            want = ort.InferenceSession(str(path), session_options()).run(None, feeds)
            row = {**stamped, "model": name, "threads": device.threads}
            builds = []
            for form in ("loop", "unrolled"):
                start = time.perf_counter()
                model = load_model(str(path), recurrent=form)
                compiled = api.compile(model, [device])
                row[f"{form}_compile_s"] = time.perf_counter() - start
                got = api.run(compiled, {s.name: feeds[s.name] for s in model.inputs})
                scale = max(float(np.abs(w).max()) for w in want) or 1.0
                row[f"{form}_rel_err"] = api.max_abs_error(got, want) / scale
                builds.append(compiled)
            inputs = [feeds[s.name] for s in model.inputs]
            peer = OnnxRuntimePeer(path, device, inputs)
            loop, unrolled, theirs = interleaved_run_seconds(
                [b.deployment for b in builds], [args.runs] * 2, peers=[peer]
            )
            peer.close()  # an idle session left behind slowed the next cases 2-5x
            for key, samples in (("loop", loop), ("unrolled", unrolled), ("ort", theirs)):
                row[f"{key}_ms"] = 1e3 * float(np.median(samples))
            rows.append(row)
            print(f"{name:18} loop {row['loop_ms']:7.3f} ms  unrolled {row['unrolled_ms']:7.3f}"
                  f"  ORT {row['ort_ms']:7.3f}  loop/ORT {row['loop_ms'] / row['ort_ms']:4.2f}x"
                  f"  compile {row['loop_compile_s']:4.1f} / {row['unrolled_compile_s']:4.1f} s"
                  f"  err {max(row['loop_rel_err'], row['unrolled_rel_err']):.0e}")  # fmt: skip
    append_rows(rows, "recurrent.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
