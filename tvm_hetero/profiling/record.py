"""ProfileRecord: one measurement (or one imported figure), frozen and JSON-serialisable."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np


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
        The measuring device (:class:`~tvm_hetero.profiling.fingerprint.Fingerprint`).
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
