"""``tvm-hetero measure``: time exported workloads here, with the TVM runtime alone."""

from __future__ import annotations

import argparse
from pathlib import Path

from tvm_hetero.cli.common import console


def run(args: argparse.Namespace) -> int:
    """Time every workload of the folder into its ``results.jsonl``; exit 1 if any failed."""
    from tvm_hetero.runtime.offline_runner import MANIFEST, RESULTS, run_folder

    folder = Path(args.folder)
    if not (folder / MANIFEST).is_file():
        raise ValueError(f"{args.folder!r} has no {MANIFEST}: export it with plan --offline")
    written, errors = run_folder(folder)
    console().print(f"wrote {written} record(s) to {folder / RESULTS}; {len(errors)} failed")
    for error in errors:
        console().print(f"FAILED {error}", markup=False)
    return 1 if errors else 0
