"""Where GPT-2's GPU build gave NaN: the same ONNX file built with nvcc's ``--use_fast_math``
(TVM's flags, tvm-hetero's until 2026-11-28) and without (now the default), beside torch.

Here: ``.venv/bin/python benchmarks/gpu/nan_probe.py --export .gpu/n`` (GPT-2 4 x 256 of
``versus_torch.py``; ``NAME.fast.tar``, ``NAME.exact.tar``, the inputs and a digest).
Box: ``python3 benchmarks/gpu/nan_probe.py --time .gpu/n --site BOX/site --out FILE``: per
build, NaN and infinity counts of its output, the first NaN's position, and the largest error
against torch where both are finite; torch's own counts beside.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from versus_torch import digest, make_inputs, seeded

NAME = "gpt2-4x256"


def export(folder: Path) -> None:
    from tvm_hetero import api
    from tvm_hetero.build import cuda_binary
    from tvm_hetero.build.multi_device import BuildOptions
    from tvm_hetero.devices import ClusterSpec
    from tvm_hetero.frontends import load_model

    folder.mkdir(parents=True, exist_ok=True)
    gpu = ClusterSpec.load(Path(__file__).parent / "box.json").device("cuda:0")
    module = seeded(NAME)
    (folder / f"{NAME}.digest").write_text(digest(module))
    inputs = make_inputs(NAME)
    np.savez(folder / f"{NAME}.inputs.npz", **inputs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.onnx"
        torch.onnx.export(module, (torch.from_numpy(inputs["ids"]),), str(path),
                          input_names=["ids"], dynamo=True, external_data=False)  # fmt: skip
        model = load_model(path)
    api.compile(model, [gpu], options=BuildOptions()).save(folder / f"{NAME}.exact.tar")
    run = cuda_binary.subprocess.run

    def fast(cmd, **kwargs):  # what tvm-hetero passed nvcc before 2026-11-28
        if "--fatbin" in cmd:
            cmd = [*cmd[:3], "--use_fast_math", *cmd[3:]]
        return run(cmd, **kwargs)

    with mock.patch.object(cuda_binary.subprocess, "run", fast):
        api.compile(model, [gpu], options=BuildOptions()).save(folder / f"{NAME}.fast.tar")


def _counts(array: np.ndarray) -> dict:
    nan = np.argwhere(np.isnan(array))
    return {"nan": int(np.isnan(array).sum()), "inf": int(np.isinf(array).sum()),
            "first_nan": nan[0].tolist() if len(nan) else None, "size": int(array.size)}  # fmt: skip


def time_probe(folder: Path, out: Path) -> None:
    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import Executor

    module = seeded(NAME)
    rows = [
        {
            "build": "torch",
            "same_weights": digest(module) == (folder / f"{NAME}.digest").read_text(),
        }
    ]
    with np.load(folder / f"{NAME}.inputs.npz") as data:
        inputs = {k: data[k] for k in data.files}
    with torch.no_grad():
        ref = module.cuda()(torch.from_numpy(inputs["ids"]).cuda()).cpu().numpy()
    rows[0] |= _counts(ref)
    for build in ("fast", "exact"):
        with (
            tempfile.TemporaryDirectory() as tmp,
            Executor(load(folder / f"{NAME}.{build}.tar", tmp)) as ex,
        ):
            (got,) = ex.run(inputs)
        finite = np.isfinite(got) & np.isfinite(ref)
        err = float(np.max(np.abs(got[finite] - ref[finite]))) if finite.any() else None
        rows.append({"build": build, **_counts(got), "max_abs_err_where_finite": err})
    with open(out, "a") as f:
        for row in rows:
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--export", type=Path, metavar="DIR")
    group.add_argument("--time", type=Path, metavar="DIR")
    parser.add_argument("--site", type=Path)
    parser.add_argument("--out", type=Path, default=Path("nan_probe.jsonl"))
    args = parser.parse_args()
    if args.export:
        export(args.export)
        return 0
    if args.site:
        os.environ["TVM_USE_RUNTIME_LIB"] = "1"
        sys.path.append(str(args.site))
    time_probe(args.time, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
