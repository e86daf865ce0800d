"""Measurement on a machine no RPC reaches (the lent GPU box): build here, time there, plan here.

An :class:`OfflineRunner` stands in for a runner in a :class:`~tvm_hetero.profiling.profiler.
Profiler`. A workload the database has no record of is not timed: it is compiled for its
devices and exported into the runner's folder, and the planner gets a placeholder (never
stored). ``tvm-hetero measure FOLDER`` (:mod:`tvm_hetero.runtime.offline_runner`) times the
folder there with the TVM runtime alone and writes ``results.jsonl``, each record under the
fingerprint of the box's device and the name the device has in the plan. Back here, the same
runner over the same folder merges the results into the database and serves them: it answers
for each device with the fingerprint the box measured it with, so the records are found.

Like TVM's builder / runner split, but driven by the planner itself: whatever a strategy asks
the profiler for (operators, sweeps, copies, subgraphs, per-operator runs, end-to-end runs) is
what is exported. A planner whose next questions depend on the answers (DUET's correction runs
what its measured best suggests) takes several rounds over the same folder: each round's
manifest lists only what is new, the box appends to ``results.jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tvm

from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.records import Fingerprint, RecordKind
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.runtime.offline_runner import FORMAT, MANIFEST, RESULTS

PLACEHOLDER_S = 1e-3
"""What an unmeasured workload reads as while its folder is being exported."""


class OfflineRunner:
    """Serves records timed on another machine and exports what they lack (see the module).

    Parameters
    ----------
    folder : str or Path
        The exchange folder: ``manifest.json`` and libraries out, ``results.jsonl`` back.
    config : MeasureConfig
        Repeats and sample time the box measures with.
    """

    offline = True
    where = "offline"

    def __init__(self, folder: str | Path, config: MeasureConfig | None = None) -> None:
        self.folder, self.config = Path(folder), config or MeasureConfig()
        self.entries: list[dict[str, Any]] = []
        self._exported: set[tuple[str, str, tuple[str, ...]]] = set()
        self.round, self.asked, self._files = 1, set(), set()
        manifest = self.folder / MANIFEST
        if manifest.is_file():
            before = json.loads(manifest.read_text())
            self.round = int(before.get("round", 1)) + 1
            for entry in before["entries"]:
                self.asked.add(_seen(entry))
                self._files |= set(_files(entry))
        self.fingerprints: dict[str, Fingerprint] = {}
        results = self.folder / RESULTS
        if results.is_file():
            for record in ProfileDB(results, strict=True):
                name = record.extra.get("device")
                if name:
                    self.fingerprints[name] = Fingerprint(**record.fingerprint)

    @property
    def measured(self) -> bool:
        """Whether the box has timed this folder (its results are here)."""
        return bool(self.fingerprints)

    def merge_into(self, db: ProfileDB) -> int:
        """Add the box's records to ``db``; how many were new."""
        results = self.folder / RESULTS
        return db.merge(ProfileDB(results, strict=True)) if results.is_file() else 0

    def close(self) -> None:
        """Nothing held open: records are exchanged through the folder."""

    def fingerprint(self, spec: DeviceSpec) -> Fingerprint:
        """The box's fingerprint of ``spec`` (from its results), else a placeholder that no
        record matches."""
        found = self.fingerprints.get(spec.name)
        return found or Fingerprint("offline", f"unmeasured {spec.name}", spec.threads, "")

    def time(self, *_args: Any) -> Any:
        """Nothing is timed here (the profiler exports instead)."""
        raise RuntimeError("an offline runner times nothing; export and measure on the box")

    def collect(
        self, kind: RecordKind, key: str, target: str, mode: str,
        devices: Sequence[DeviceSpec], workload: dict, executable: Any,
        inputs: Sequence[tuple[Sequence[int], str]], by_symbol: dict | None = None,
        extra: dict | None = None,
    ) -> None:  # fmt: skip
        """Export one unmeasured workload: its library and its manifest entry (once)."""
        if not self._first(key, target, devices):
            return
        lib = f"{len(self.entries):04d}_{key.replace(':', '_')[:48]}.so"
        executable.export_library(str(self.folder / lib))
        self._add(
            kind, key, workload, target, mode, devices, extra, lib=lib,
            inputs=[[list(s), d] for s, d in inputs],
            **({"by_symbol": by_symbol} if by_symbol is not None else {}),
        )  # fmt: skip

    def collect_deployments(
        self, kind: RecordKind, key: str, target: str, mode: str,
        devices: Sequence[DeviceSpec], workload: dict, deployments: dict[str, Any],
        how: dict[str, Any],
    ) -> None:  # fmt: skip
        """Export a workload the box runs on its concurrent runtime: compiled models by role
        (``run``; or a handoff's chains ``one`` and ``two``) and ``how`` to time them
        (``{"measure": "run" | "handoff", "repeat": ..., "hops": ...}``)."""
        if not self._first(key, target, devices):
            return
        stem = f"{len(self.entries):04d}_{key.replace(':', '_')[:40]}"
        tars = {role: f"{stem}_{role}.tar" for role in deployments}
        for role, compiled in deployments.items():
            compiled.save(self.folder / tars[role])
        self._add(kind, key, workload, target, mode, devices, None, deployments=tars, how=how)

    def _add(
        self, kind: RecordKind, key: str, workload: dict, target: str, mode: str,
        devices: Sequence[DeviceSpec], extra: dict | None, **fields: Any,
    ) -> None:  # fmt: skip
        """One manifest entry: what every workload says, and what its kind adds (``fields``)."""
        self.entries.append({
            **fields, "kind": kind.value, "workload_key": key, "workload": workload,
            "target": target, "mode": mode, "devices": [_device_entry(d) for d in devices],
            "extra": extra or {},
        })  # fmt: skip

    def _first(self, key: str, target: str, devices: Sequence[DeviceSpec]) -> bool:
        """Whether this workload is new to the folder (which then exists); marks it exported."""
        seen = (key, target, tuple(d.name for d in devices))
        if seen in self._exported:
            return False
        self._exported.add(seen)
        self.folder.mkdir(parents=True, exist_ok=True)
        return True

    @property
    def asked_again(self) -> int:
        """How many of this round's workloads an earlier round exported already (the box's
        results lack them: it failed them, or they were not brought back)."""
        return sum(_seen(e) in self.asked for e in self.entries)

    def save(self) -> Path:
        """Write the manifest of this round's workloads (what the box must time), and remove
        the files of an earlier round's workloads that this round does not list."""
        current = {f for e in self.entries for f in _files(e)}
        for name in self._files - current:
            (self.folder / name).unlink(missing_ok=True)
        manifest = {
            "format": FORMAT, "tvm": tvm.__version__, "round": self.round, "entries": self.entries,
            "config": {"repeat": self.config.repeat, "min_repeat_ms": self.config.min_repeat_ms,
                       "max_number": self.config.max_number},
        }  # fmt: skip
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / MANIFEST
        path.write_text(json.dumps(manifest, indent=1))
        return path


def _seen(entry: dict[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """What identifies a manifest entry's workload (as ``_first`` marks it): key, target and
    device names."""
    return entry["workload_key"], entry["target"], tuple(d["name"] for d in entry["devices"])


def _files(entry: dict[str, Any]) -> list[str]:
    """The files of one manifest entry: its library, or its compiled models."""
    return [entry["lib"]] if "lib" in entry else list(entry["deployments"].values())


def _device_entry(spec: DeviceSpec) -> dict[str, Any]:
    kind = "cuda" if spec.kind.value == "cuda" else "cpu"
    return {"name": spec.name, "kind": kind, "index": spec.index, "threads": spec.threads,
            "llvm_cpu": spec.target.get("mcpu", "")}  # fmt: skip
