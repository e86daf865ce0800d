"""The box's outputs against CPU builds run here: every GPU and CPU + GPU build must agree.

``latency.py`` saved each artifact's outputs on the box as ``NAME.VARIANT.npz`` (inputs drawn
with seed 0 from the artifact's input specs). Here each ``NAME`` is run from ``--reference
DIR/NAME.cpu.tar`` (a CPU build of the same model, compiled here or in ``prepare.sh``) on the
same inputs, and the largest relative error of every output is reported::

    .venv/bin/python benchmarks/gpu/compare.py BOX_OUT/outputs_a --reference .gpu/a .gpu/ref \\
        --out benchmarks/results/gpu_outputs.json
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from latency import load_one


def reference_outputs(name: str, folders: list[Path]) -> list[np.ndarray] | None:
    """Outputs of the first ``FOLDER/NAME.cpu.tar`` run here, or ``None`` if there is none."""
    for folder in folders:
        tar = folder / f"{name}.cpu.tar"
        if tar.is_file():
            with ExitStack() as stack:
                one = load_one(tar, None, stack)
                return [np.asarray(o) for o in one.executor.run(one.inputs)]
    return None


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest ``|got - want|`` over the largest ``|want|`` (1 where the shapes differ)."""
    if got.shape != want.shape:
        return 1.0
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got.astype("float64") - want))) / scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", type=Path, help="a folder of NAME.VARIANT.npz from the box")
    parser.add_argument("--reference", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows, references = [], {}
    for box_file in sorted(args.outputs.glob("*.npz")):
        name = box_file.name.split(".")[0]
        if name not in references:
            references[name] = reference_outputs(name, args.reference)
        want = references[name]
        with np.load(box_file) as data:
            got = [data[k] for k in data.files]
        if want is None or len(got) != len(want):
            error = None
        else:
            error = max(relative_error(g, w) for g, w in zip(got, want, strict=True))
        rows.append({"artifact": box_file.stem, "outputs": len(got), "max_rel_error": error})
        shown = "no CPU build here" if error is None else f"{error:.2e}"
        print(f"{box_file.stem:28} {len(got):3} output(s)  max rel error {shown}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
