"""Time compiled models on this machine with the TVM runtime alone (run on the GPU box).

For each ``.tar``: load it, run it on seeded random inputs (the same as ``tvm-hetero run``'s),
time ``--repeat`` runs after ``--warmup``, and write one JSON line (p50 / p99 ms, devices, units,
copies a run moves) to ``--out``; the outputs go to ``--outputs-dir`` as ``NAME.npz`` so they can
be compared with a CPU build where the compiler is. Imports only tvm-hetero's runtime::

    PYTHONPATH=box/site TVM_USE_RUNTIME_LIB=1 python3 benchmarks/gpu/latency.py A.tar B.tar \\
        --out $OUT/latency.jsonl --outputs-dir $OUT/outputs
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np


def time_one(
    path: Path, repeat: int, warmup: int, outputs_dir: Path | None, inputs_dir: Path | None
) -> dict:
    import tvm

    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import Executor

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        deployment = load(path, tmp)
        load_s = time.perf_counter() - start
        given = inputs_dir / f"{path.stem.split('.')[0]}.inputs.npz" if inputs_dir else None
        if given is not None and given.is_file():  # the inputs torch_ref.py saved
            with np.load(given) as data:
                inputs = {k: data[k] for k in data.files}
        else:
            rng = np.random.default_rng(0)
            inputs = {s.name: s.random(rng) for s in deployment.inputs}
        with Executor(deployment) as ex:
            outs = ex.run(inputs)
            stats = ex.time(inputs, repeat=repeat, warmup=warmup)
    if outputs_dir is not None:
        outputs_dir.mkdir(parents=True, exist_ok=True)
        np.savez(outputs_dir / f"{path.stem}.npz", *outs)
    return {
        "artifact": path.name, "model": deployment.model, "tvm": tvm.__version__,
        "devices": [d.name for d in deployment.devices], "units": len(deployment.units),
        "copies_per_run": len(deployment.copies),
        "copy_bytes_per_run": sum(s.nbytes for s in deployment.copies),
        "p50_ms": stats.median_ms, "p99_ms": stats.p99_ms, "runs": repeat, "load_s": load_s,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--outputs-dir", type=Path)
    parser.add_argument("--inputs-dir", type=Path, help="NAME.inputs.npz per artifact NAME.*.tar")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    failed = 0
    with open(args.out, "a") as out:
        for path in args.artifacts:
            try:
                row = time_one(path, args.repeat, args.warmup, args.outputs_dir, args.inputs_dir)
            except Exception as err:  # report it and go on with the others
                failed += 1
                row = {"artifact": path.name, "error": f"{type(err).__name__}: {err}"}
                traceback.print_exc()
            print(json.dumps(row), flush=True)
            out.write(json.dumps(row) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
