"""Records and device fingerprints: one measurement (or one imported figure) and the identity of
the device that took it, frozen and JSON-serialisable. The bottom of the package: it imports
nothing else of it, so the runtime, the offline runner and the database all read it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np


def json_key(data: object) -> str:
    """A short stable hash of JSON-friendly ``data`` (16 hex digits of the SHA-1 of its JSON with
    sorted keys): how fingerprints, imported workloads and plans are named in record keys."""
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


CPU_IDS = (
    ("family", "cpu family"),
    ("model", "model"),
    ("stepping", "stepping"),
    ("part", "CPU part"),
    ("variant", "CPU variant"),
)
"""``/proc/cpuinfo`` fields that name a CPU's generation: x86 family, model and stepping, Arm's
part and variant."""


@dataclass(frozen=True)
class Fingerprint:
    """Identity of a measuring device.

    Attributes
    ----------
    kind : str
        ``cpu``, ``cuda`` or ``simulated``.
    name : str
        CPU model (with LLVM's CPU name), GPU name, or the source of a simulated profile.
    threads : int or None
        Worker threads used (CPU).
    tvm : str
        TVM version.
    host : str
        Where it was measured (``local`` or the RPC address).
    """

    kind: str
    name: str
    threads: int | None
    tvm: str
    host: str = "local"

    @property
    def key(self) -> str:
        """A short stable hash of every field."""
        return json_key(asdict(self))

    def to_dict(self) -> dict:
        """JSON-friendly form."""
        return asdict(self)


@functools.cache
def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's marketing name from ``cpuinfo`` with its family, model and stepping (or the
    platform's processor string).

    The marketing name alone does not tell CPUs apart: a cloud host reports ``AMD EPYC`` for
    Zen 3 and Zen 5 alike, and timings taken on one were served on the other.
    """
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    ids = [f"{k} {fields[c]}" for k, c in CPU_IDS if fields.get(c)]
    return f"{name} ({', '.join(ids)})" if ids else name


def simulated_fingerprint(source: str) -> Fingerprint:
    """Fingerprint of a device that exists only as published or hand-entered numbers."""
    return Fingerprint("simulated", source, None, "n/a", "published")


class RecordKind(StrEnum):
    """What was measured."""

    OP = "op"
    """One operator compiled standalone."""
    SUBGRAPH = "subgraph"
    """An outlined subgraph compiled with full fusion."""
    TRANSFER = "transfer"
    """A ``to_vdevice`` copy of one size."""
    MODEL = "model"
    """A whole model end to end."""
    OP_IN_MODEL = "op_in_model"
    """One operator's (or copy's) time inside an instrumented whole-model run."""


MEASURED = "measured"
"""``source`` of a record this package timed; anything else (``published:...``) was imported."""


@dataclass(frozen=True)
class ProfileRecord:
    """One timing.

    Attributes
    ----------
    kind : RecordKind
        What was measured.
    workload_key : str
        Structural hash of the measured module (or a stable key of an imported workload).
    workload : dict
        Human-readable description (op, shapes, dtypes, dimension sizes...).
    target : str
        The TVM target (JSON) it was compiled for.
    mode : str
        Compile mode (``default``, ``dlight``, ``metaschedule``).
    fingerprint : dict
        The measuring device (:class:`~tvm_hetero.records.Fingerprint`).
    fingerprint_key : str
        Its hash.
    samples_s : tuple[float, ...]
        Every repeat, in seconds (each the mean of ``number`` runs; the warm-up run excluded).
    number : int
        Runs averaged per sample.
    repeat : int
        Samples taken.
    source : str
        ``measured`` or ``published:<reference>``.
    created : float
        Unix time.
    extra : dict
        Kind-specific data (node id, bytes of a transfer...).
    """

    kind: RecordKind
    workload_key: str
    workload: dict[str, Any]
    target: str
    mode: str
    fingerprint: dict[str, Any]
    fingerprint_key: str
    samples_s: tuple[float, ...]
    number: int
    repeat: int
    source: str = MEASURED
    created: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What identifies the measured thing: kind, workload, target, mode, device."""
        return (self.kind.value, self.workload_key, self.target, self.mode, self.fingerprint_key)

    @property
    def record_id(self) -> str:
        """Hash of the whole record (two identical records are one)."""
        return hashlib.sha1(self.to_json().encode()).hexdigest()[:20]

    @property
    def measured(self) -> bool:
        """``False`` for published or hand-entered figures."""
        return self.source == MEASURED

    @property
    def median_s(self) -> float:
        """Median sample."""
        return float(np.median(self.samples_s))

    @property
    def mean_s(self) -> float:
        """Mean sample."""
        return float(np.mean(self.samples_s))

    @property
    def std_s(self) -> float:
        """Standard deviation of the samples."""
        return float(np.std(self.samples_s))

    def percentile_s(self, q: float) -> float:
        """The ``q``-th percentile (``99``, ``99.9``)."""
        return float(np.percentile(self.samples_s, q))

    def to_json(self) -> str:
        """One line of JSON."""
        data = asdict(self)
        data["kind"] = self.kind.value
        data["samples_s"] = list(self.samples_s)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ProfileRecord:
        """Inverse of :meth:`to_json`; raises ``ValueError`` on a malformed record."""
        try:
            data = json.loads(text)
            data["kind"] = RecordKind(data["kind"])
            data["samples_s"] = tuple(float(s) for s in data["samples_s"])
            record = cls(**data)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a profile record: {err}") from None
        if not record.samples_s:
            raise ValueError("not a profile record: no samples")
        return record
