"""Time an exported workload folder with only the TVM runtime, and write ``results.jsonl``.

Run on the measuring machine (the GPU box), where the bundle of ``tvm-hetero bundle`` is::

    tvm-hetero measure FOLDER        # or: python -m tvm_hetero.runtime.offline_runner FOLDER

Each entry of the manifest (written by :class:`tvm_hetero.profiling.offline.OfflineRunner`) is
a library compiled for its devices: a workload timed with ``time_evaluator`` (which waits for
the GPU), or a per-operator run (``by_symbol``) timed by the VM instrument of
:mod:`.instrument`; or compiled models run on the concurrent runtime (``deployments``: a model
end to end, or a handoff's two chains; :mod:`.executor`). A folder's end-to-end runs are timed
together, in interleaved rounds: a planner compares them. Every record carries this
machine's fingerprint of the entry's first device and the name that device has in the plan.
Imports nothing of tvm-hetero beyond its runtime-only modules.
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
FORMAT = 3
"""2: an entry names all its devices (a copy has two) and may be a per-operator run; 3: or
compiled models the runtime runs."""


def run_folder(folder: str | Path) -> tuple[int, list[str]]:
    """Time every entry of the manifest; returns (records written, errors)."""
    from tvm_hetero.runtime.without_torch import import_tvm_without_torch

    import_tvm_without_torch()  # the box's runtime never holds a torch tensor
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
    together = _runs_together(folder, entries)
    with open(folder / RESULTS, "a") as out:
        for i, entry in enumerate(entries, 1):
            print(f"[{i}/{len(entries)}] {_name(entry)}", flush=True)
            try:
                record = together.get(i - 1) or _measure(folder, entry, config)
            except Exception as err:  # one broken entry must not stop the others
                errors.append(f"{_name(entry)}: {type(err).__name__}: {err}")
                traceback.print_exc()
                continue
            out.write(record.to_json() + "\n")
            out.flush()
            written += 1
    return written, errors


ROUNDS = 5
"""Rounds over a folder's end-to-end runs (:func:`~tvm_hetero.runtime.executor.
interleaved_run_seconds`): a planner compares them with one another."""


def _runs_together(folder: Path, entries: list[dict[str, Any]]) -> dict[int, Any]:
    """Records of the folder's end-to-end runs (DUET's trials, each device alone), timed
    together in interleaved rounds, by entry index; empty when there are fewer than two, or
    when one fails to load or run (then each is timed alone, its error reported)."""
    import tempfile

    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import interleaved_run_seconds

    runs = [i for i, e in enumerate(entries) if e.get("how", {}).get("measure") == "run"]
    if len(runs) < 2:
        return {}
    print(f"{len(runs)} end-to-end runs, {ROUNDS} interleaved rounds", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            loaded = [load(folder / entries[i]["deployments"]["run"], f"{tmp}/{i}") for i in runs]
            repeats = [entries[i]["how"]["repeat"] for i in runs]
            samples = interleaved_run_seconds(loaded, repeats, ROUNDS)
    except Exception:  # timed one by one instead, where the broken one says what it is
        traceback.print_exc()
        return {}
    extra = {"sample_ms": 0.0, "rounds": ROUNDS}
    return {i: _record(entries[i], s, 1, extra) for i, s in zip(runs, samples, strict=True)}


def _measure(folder: Path, entry: dict[str, Any], config: Any) -> Any:
    import tvm

    from tvm_hetero.runtime.device import vdevice_runtime_device
    from tvm_hetero.runtime.instrument import op_times
    from tvm_hetero.runtime.measure import random_args
    from tvm_hetero.runtime.timer import LocalRunner
    from tvm_hetero.runtime.worker import use_threads

    specs = entry["devices"]
    if "deployments" in entry:
        return _record(entry, _on_runtime(folder, entry), 1, {"sample_ms": 0.0})
    refs = [("cuda" if d["kind"] == "cuda" else "llvm", d["index"]) for d in specs]
    use_threads(max((d["threads"] or 0 for d in specs if d["kind"] == "cpu"), default=0) or 1)
    # the devices first: a GPU's runtime must be loaded before a library with its kernels is
    devs = [vdevice_runtime_device(*ref) for ref in refs]
    library = tvm.runtime.load_module(str(folder / entry["lib"]))
    args = random_args(entry["inputs"])
    if "by_symbol" in entry:  # a per-operator run
        node_seconds, walls = op_times(library, devs, args, entry["by_symbol"], config.repeat)
        return _record(entry, walls, 1, {"node_seconds": node_seconds, "sample_ms": 0.0})
    timing = LocalRunner().time(library, refs, args, config)
    return _record(entry, timing.samples_s, timing.number, {"sample_ms": config.min_repeat_ms})


def _record(entry: dict[str, Any], samples: Any, number: int, extra: dict[str, Any]) -> Any:
    """The entry's record, under this machine's fingerprint of its first device."""
    from tvm_hetero.records import ProfileRecord, RecordKind
    from tvm_hetero.runtime.device import local_fingerprint

    first = entry["devices"][0]
    fp = local_fingerprint(first["kind"], first["index"], first["threads"], first["llvm_cpu"])
    extra = {**entry.get("extra", {}), **extra, "offline": True, "device": first["name"]}
    return ProfileRecord(
        RecordKind(entry["kind"]), entry["workload_key"], entry["workload"], entry["target"],
        entry["mode"], fp.to_dict(), fp.key, tuple(samples), number, len(samples), extra=extra,
    )  # fmt: skip


def _on_runtime(folder: Path, entry: dict[str, Any]) -> tuple[float, ...]:
    """Samples of an entry's compiled models run on the concurrent runtime, as its ``how`` asks."""
    import tempfile

    from tvm_hetero.runtime.deployment import load
    from tvm_hetero.runtime.executor import handoff_seconds, run_seconds

    how = entry["how"]
    with tempfile.TemporaryDirectory() as tmp:
        loaded = {
            role: load(folder / tar, f"{tmp}/{role}") for role, tar in entry["deployments"].items()
        }
        if how["measure"] == "handoff":
            return handoff_seconds(loaded["one"], loaded["two"], how["hops"], how["repeat"])
        return run_seconds(loaded["run"], how["repeat"])


def _name(entry: dict[str, Any]) -> str:
    return entry.get("lib") or next(iter(entry["deployments"].values()))


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
