"""Offline measurement for machines no RPC reaches: build here, time there, merge back.

Like TVM's builder / runner split: :func:`export_candidates` compiles every workload into a folder
of exported libraries with a ``manifest.json``; ``python -m tvm_hetero.runtime.offline_runner
FOLDER`` times them on the target machine with nothing but the TVM runtime (the bundle of
``gpu-runtime-bundle.sh``) and writes ``results.jsonl``; :func:`merge_results` adds those records
to a profile database.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import tvm

from tvm_hetero.build.multi_device import BuildOptions, build
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import device_ref, place_on, target_key
from tvm_hetero.profiling.record import RecordKind
from tvm_hetero.profiling.workloads import input_infos, workload_key
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.runtime.offline_runner import MANIFEST, RESULTS


@dataclass(frozen=True)
class Candidate:
    """One workload to build here and time elsewhere."""

    mod: tvm.IRModule = field(repr=False)
    device: DeviceSpec
    kind: RecordKind
    workload: dict


def export_candidates(
    candidates: Sequence[Candidate], folder: str | Path, options: BuildOptions | None = None,
    config: MeasureConfig | None = None,
) -> Path:  # fmt: skip
    """Build each candidate into ``folder`` and write the manifest; returns its path.

    Identical workloads (same key, target and device) are exported once.
    """
    options, config = options or BuildOptions(), config or MeasureConfig()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entries, seen = [], set()
    for c in candidates:
        key, target = workload_key(c.mod), target_key(c.device)
        if (key, target, c.device.name) in seen:
            continue
        seen.add((key, target, c.device.name))
        lib = f"{len(entries):04d}_{key}.so"
        build(place_on(c.mod, [c.device]), options).export_library(str(folder / lib))
        entries.append({
            "lib": lib, "kind": c.kind.value, "workload_key": key, "workload": c.workload,
            "target": target, "mode": options.mode_key,
            "device": {"kind": device_ref(c.device)[0], "index": c.device.index,
                       "threads": c.device.threads,
                       "llvm_cpu": c.device.target.get("mcpu", "")},
            "inputs": [[list(s), d] for s, d in input_infos(c.mod)],
        })  # fmt: skip
    manifest = {
        "format": 1, "tvm": tvm.__version__, "entries": entries,
        "config": {"repeat": config.repeat, "min_repeat_ms": config.min_repeat_ms,
                   "max_number": config.max_number},
    }  # fmt: skip
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest, indent=1))
    return path


def merge_results(db: ProfileDB, results: str | Path) -> int:
    """Add the records an offline run wrote (``results.jsonl`` or its folder) to ``db``."""
    path = Path(results)
    path = path / RESULTS if path.is_dir() else path
    return db.merge(ProfileDB(path, strict=True))
