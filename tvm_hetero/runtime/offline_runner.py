"""Time an exported workload folder with only the TVM runtime, and write ``results.jsonl``.

Run on the measuring machine (the GPU box), where the bundle of ``tvm-hetero bundle`` is::

    tvm-hetero measure FOLDER        # or: python -m tvm_hetero.runtime.offline_runner FOLDER

Each entry of the manifest (written by :class:`tvm_hetero.profiling.offline.OfflineRunner`) is
a library compiled for its devices: a workload timed with ``time_evaluator`` (which waits for
the GPU), or a per-operator run (``by_symbol``) timed by the VM instrument of
:mod:`.instrument`. Every record carries this machine's fingerprint of the entry's first device
and the name that device has in the plan. Imports nothing of tvm-hetero beyond its runtime-only
modules.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"
FORMAT = 2
"""2: an entry names all its devices (a copy has two) and may be a per-operator run."""


def run_folder(folder: str | Path) -> tuple[int, list[str]]:
    """Time every entry of the manifest; returns (records written, errors)."""
    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{folder / MANIFEST}: format {manifest.get('format')!r}, this runner reads {FORMAT}; "
            "export it again"
        )
    from tvm_hetero.runtime.measure import MeasureConfig

    config = MeasureConfig(**manifest["config"])
    written, errors = 0, []
    entries = manifest["entries"]
    with open(folder / RESULTS, "a") as out:
        for i, entry in enumerate(entries, 1):
            print(f"[{i}/{len(entries)}] {entry['lib']}", flush=True)
            try:
                record = _measure(folder, entry, config)
            except Exception as err:  # one broken entry must not stop the others
                errors.append(f"{entry['lib']}: {type(err).__name__}: {err}")
                traceback.print_exc()
                continue
            out.write(record.to_json() + "\n")
            out.flush()
            written += 1
    return written, errors


def _measure(folder: Path, entry: dict[str, Any], config: Any) -> Any:
    import tvm

    from tvm_hetero.profiling.fingerprint import local_fingerprint
    from tvm_hetero.profiling.record import ProfileRecord, RecordKind
    from tvm_hetero.runtime.device import vdevice_runtime_device
    from tvm_hetero.runtime.instrument import op_times
    from tvm_hetero.runtime.measure import random_args
    from tvm_hetero.runtime.timer import LocalRunner
    from tvm_hetero.runtime.worker import use_threads

    specs = entry["devices"]
    refs = [("cuda" if d["kind"] == "cuda" else "llvm", d["index"]) for d in specs]
    use_threads(max((d["threads"] or 0 for d in specs if d["kind"] == "cpu"), default=0) or 1)
    # the devices first: a GPU's runtime must be loaded before a library with its kernels is
    devs = [vdevice_runtime_device(*ref) for ref in refs]
    library = tvm.runtime.load_module(str(folder / entry["lib"]))
    args = random_args(entry["inputs"])
    extra = {**entry.get("extra", {}), "offline": True, "device": specs[0]["name"]}
    if "by_symbol" in entry:  # a per-operator run
        node_seconds, walls = op_times(library, devs, args, entry["by_symbol"], config.repeat)
        samples, number = tuple(walls), 1
        extra |= {"node_seconds": node_seconds, "sample_ms": 0.0}
    else:
        timing = LocalRunner().time(library, refs, args, config)
        samples, number = timing.samples_s, timing.number
        extra["sample_ms"] = config.min_repeat_ms
    first = specs[0]
    fp = local_fingerprint(first["kind"], first["index"], first["threads"], first["llvm_cpu"])
    return ProfileRecord(
        RecordKind(entry["kind"]), entry["workload_key"], entry["workload"], entry["target"],
        entry["mode"], fp.to_dict(), fp.key, samples, number, len(samples), extra=extra,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit 1 if any entry failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="folder with manifest.json and the exported libraries")
    args = parser.parse_args(argv)
    written, errors = run_folder(args.folder)
    print(f"wrote {written} record(s) to {Path(args.folder) / RESULTS}; {len(errors)} failed")
    for e in errors:
        print("FAILED", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
