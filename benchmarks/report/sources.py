"""Results files and where each came from: the command, the commit, the host and the date.

A results file may carry these itself (top-level keys, or under ``meta``; for JSON lines, on
its rows); what it lacks comes from ``benchmarks/results/provenance.toml``, written when the
file was recorded. A file with neither fails the report: a figure must say where it came from.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markdown import table

RESULTS = Path(__file__).resolve().parent.parent / "results"
FIELDS = ("command", "commit", "host", "date")


@dataclass(frozen=True)
class Source:
    """Where a results file's figures were measured."""

    file: str
    command: str
    commit: str
    host: str
    date: str

    def line(self) -> str:
        """One Markdown line naming the file, the command, the commit, the host and the date."""
        return (
            f"*`results/{self.file}`: `{self.command}`, commit {self.commit}, {self.host}, "
            f"{self.date}.*"
        )


def load(name: str, results: Path = RESULTS) -> Any:
    """A results file's content: the JSON object, or a list of rows for JSON lines."""
    text = (results / name).read_text()
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return json.loads(text)


def source(name: str, data: Any = None, results: Path = RESULTS) -> Source:
    """Where ``name``'s figures come from: each row's own fields, else the provenance file's
    (the distinct values joined by `` / `` where the rows differ).

    Raises
    ------
    KeyError
        A field found in neither.
    """
    data = load(name, results) if data is None else data
    known = tomllib.loads((results / "provenance.toml").read_text()).get(name, {})
    layers = _layers(data)
    merged: dict[str, str | None] = {}
    for field in FIELDS:
        values = [str(x[field]) if field in x else known.get(field) for x in layers] or [
            known.get(field)
        ]
        merged[field] = None if None in values else " / ".join(dict.fromkeys(values))
    missing = [k for k, v in merged.items() if v is None]
    if missing:
        raise KeyError(f"results/{name}: no {', '.join(missing)} (add them to provenance.toml)")
    return Source(name, **merged)


def _layers(data: Any) -> list[dict]:
    """The dicts that may carry a file's fields: its rows, or the object and its ``meta`` (with
    each of its ``rows`` where those carry fields of their own: rows measured at other times)."""
    if isinstance(data, list):
        return [row for row in data if isinstance(row, dict)]
    if isinstance(data, dict):
        meta = data.get("meta")
        top = {**meta, **data} if isinstance(meta, dict) else data
        rows = [r for r in data.get("rows", []) if isinstance(r, dict)]
        if any(field in r for r in rows for field in FIELDS):  # rows measured apart
            return [{**top, **r} for r in rows]
        return [top]
    return []


def titled(
    name: str, data: Any, header: Sequence[str], rows: Iterable[Sequence[object]], *notes: str
) -> str:
    """A section: ``name``'s provenance line, its table and, after a blank line, any notes."""
    parts = [source(name, data).line(), "", table(header, rows)]
    return "\n".join([*parts, "", *notes] if notes else parts)


def latest(rows: Iterable[dict], key: str | Callable[[dict], Hashable]) -> dict[Hashable, dict]:
    """The last row of each key (a field's name, or a function of the row), in first-seen order:
    a results file appended to by every run keeps only its newest figure per case."""
    of = (lambda r: r[key]) if isinstance(key, str) else key
    last: dict[Hashable, dict] = {}
    for r in rows:
        last[of(r)] = r
    return last


ZEN = {(23, 1): "Zen 1", (25, 1): "Zen 3", (25, 17): "Zen 4"}
"""AMD's core generation by CPU family and model, as the hosts of these results report them."""


def cpu_name(host: str) -> str:
    """A results row's host, short: its name before the details (``Intel Xeon``, ``AMD EPYC``),
    with AMD's core generation where the family and model name one (``AMD EPYC Zen 4``) and
    Intel's model number (``Intel Xeon model 207``): rows of one name come from one kind of CPU."""
    name = host.split(" (")[0].split(",")[0].replace("(R)", "").replace(" Processor", "")
    found = re.search(r"family (\d+), model (\d+)", host)
    if found is None:
        return name
    family, model = int(found[1]), int(found[2])
    if name.startswith("AMD") and (family, model) in ZEN:
        return f"{name} {ZEN[family, model]}"
    return f"{name} model {model}" if name.startswith("Intel") else name


def latest_by_cpu(
    rows: Iterable[dict], key: Callable[[dict], Hashable]
) -> tuple[list[dict], bool]:  # fmt: skip
    """The last row of each key and kind of CPU (:func:`latest`, :func:`cpu_name`), and
    whether they come from more than one kind: a table then names each row's CPU."""
    kept = list(latest(rows, lambda r: (key(r), cpu_name(r["host"]))).values())
    return kept, len({cpu_name(r["host"]) for r in kept}) > 1
