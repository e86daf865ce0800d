"""ProfileDB: a persistent, append-only JSON-lines store of profile records.

JSON lines rather than SQLite: each record is one self-contained line, so two databases merge by
concatenation, a diff shows what was measured, a damaged line is reported by number while every
other line stays readable, and the offline runner on the GPU machine writes the same format with
nothing but the standard library. Writers take an exclusive ``flock`` and append whole lines, so
concurrent processes lose nothing.
"""

from __future__ import annotations

import csv
import fcntl
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tvm_hetero.records import ProfileRecord, RecordKind, json_key, simulated_fingerprint

logger = logging.getLogger(__name__)


class ProfileDBError(ValueError):
    """A profile database file with a damaged record (the message names file and line)."""


def check_profile_db(path: str | Path) -> None:
    """Refuse, as opening it would, an existing file that is not a profile database (a plan
    given as ``--db``), before any work. A file whose first line starts a JSON object is left to
    the command's own :class:`ProfileDB` (its damaged lines are skipped there): only another
    file is read here, so a good database is not parsed twice."""
    path = Path(path)
    if not path.exists():
        return
    if not path.is_dir():
        with open(path, "rb") as f:
            first = next((line.strip() for line in f if line.strip()), b"")
        if not first or first.startswith(b'{"'):
            return
    ProfileDB(path)


class ProfileDB:
    """Profile records on disk, indexed by what they measured.

    Parameters
    ----------
    path : str or Path
        The ``.jsonl`` file (created on first write).
    strict : bool
        Raise :class:`ProfileDBError` on a damaged line instead of skipping it with a warning.

    Attributes
    ----------
    problems : list[str]
        ``file:line: reason`` of every line that could not be read.
    """

    def __init__(self, path: str | Path, strict: bool = False) -> None:
        self.path = Path(path)
        self.strict = strict
        self.problems: list[str] = []
        self._records: dict[str, ProfileRecord] = {}
        self._by_key: dict[tuple, list[ProfileRecord]] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        if self.path.is_dir():
            raise ProfileDBError(f"{self.path} is a folder, not a profile database (.jsonl)")
        with open(self.path, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            lines = f.readlines()
            fcntl.flock(f, fcntl.LOCK_UN)
        for lineno, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:  # a damaged byte costs its line, not the file
                self._index(ProfileRecord.from_json(raw.decode("utf-8")))
            except ValueError as err:  # UnicodeDecodeError is one
                reason = "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else str(err)
                problem = f"{self.path}:{lineno}: {reason}"
                if self.strict:
                    raise ProfileDBError(problem) from None
                self.problems.append(problem)
                logger.warning("skipping damaged profile record %s", problem)
        first = next((raw.strip() for raw in lines if raw.strip()), b"")
        if not self._records and first and not first.startswith(b'{"'):  # a plan, a model
            raise ProfileDBError(
                f"{self.path} is not a profile database: none of its lines is a profile record "
                f"({self.problems[0]}); give a .jsonl of records or a new file"
            )

    def _index(self, record: ProfileRecord) -> bool:
        rid = record.record_id
        if rid in self._records:
            return False
        self._records[rid] = record
        self._by_key.setdefault(record.key, []).append(record)
        return True

    def add(self, records: Iterable[ProfileRecord]) -> int:
        """Append new records (duplicates are skipped); returns how many were written."""
        fresh = [r for r in records if r.record_id not in self._records]
        if not fresh:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(r.to_json() + "\n" for r in fresh)
        with open(self.path, "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            end = f.seek(0, os.SEEK_END)
            if end:
                f.seek(end - 1)
                if f.read(1) != b"\n":  # the last line was cut short (a killed writer)
                    text = "\n" + text  # so the first new record starts on its own line
            f.write(text.encode())
            f.flush()
            os.fsync(f.fileno())
            fcntl.flock(f, fcntl.LOCK_UN)
        return sum(self._index(r) for r in fresh)

    def lookup(
        self, kind: RecordKind, workload_key: str, target: str, mode: str, fingerprint_key: str
    ) -> ProfileRecord | None:
        """The newest record of exactly this workload, target, mode and device, if any."""
        found = self._by_key.get((kind.value, workload_key, target, mode, fingerprint_key))
        return max(found, key=lambda r: r.created) if found else None

    def query(self, **fields: Any) -> list[ProfileRecord]:
        """Records whose attributes equal ``fields`` (``kind=RecordKind.OP, mode="default"``)."""
        return [r for r in self if all(getattr(r, k) == v for k, v in fields.items())]

    def merge(self, other: ProfileDB | str | Path) -> int:
        """Add every record of ``other`` not already here; returns how many were added."""
        other = other if isinstance(other, ProfileDB) else ProfileDB(other)
        return self.add(other)

    def import_published(self, path: str | Path, reference: str) -> int:
        """Import published or hand-entered timings (JSON list or CSV), marked as not measured.

        Each row needs ``device``, ``op`` and ``time_ms`` (or ``time_s``); other columns (shapes,
        dtype...) describe the workload. Records are of kind ``op`` on a simulated device named
        ``reference:device``.
        """
        path = Path(path)
        rows = _read_rows(path)
        records = []
        for i, row in enumerate(rows, 1):
            missing = [k for k in ("device", "op") if not row.get(k)]
            if missing or not ("time_ms" in row or "time_s" in row):
                raise ProfileDBError(f"{path}:{i}: needs device, op and time_ms or time_s")
            seconds = float(row["time_s"]) if "time_s" in row else float(row["time_ms"]) / 1e3
            workload = {k: v for k, v in row.items() if k not in ("device", "time_ms", "time_s")}
            fp = simulated_fingerprint(f"{reference}:{row['device']}")
            key = json_key(workload)
            records.append(
                ProfileRecord(
                    RecordKind.OP,
                    key,
                    workload,
                    "simulated",
                    "published",
                    fp.to_dict(),
                    fp.key,
                    (seconds,),
                    1,
                    1,
                    f"published:{reference}",
                )
            )
        return self.add(records)

    def __iter__(self) -> Iterator[ProfileRecord]:
        return iter(self._records.values())

    def __len__(self) -> int:
        return len(self._records)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ProfileDBError(f"{path}: no such file")
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    try:
        rows = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ProfileDBError(f"{path}:{err.lineno}: not valid JSON: {err.msg}") from None
    if not isinstance(rows, list):
        raise ProfileDBError(f"{path}: expected a JSON list of rows")
    return rows
