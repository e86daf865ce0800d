"""Save and load compiled models: one ``.tar`` holding the library and a JSON description."""

from __future__ import annotations

import json
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm

LIB_NAME = "mod.so"
META_NAME = "meta.json"


class ArtifactError(ValueError):
    """A file that is not a tvm-hetero compiled model."""


@dataclass(frozen=True)
class Artifact:
    """A compiled model as loaded from disk.

    ``meta`` holds ``model``, ``inputs`` (name, shape, dtype, high), ``vdevices`` (kind, index,
    name) in vdevice order, ``plan`` and ``build`` options.
    """

    lib: tvm.runtime.Module
    meta: dict[str, Any]


def save(executable: tvm.runtime.Executable, meta: dict[str, Any], path: str | Path) -> Path:
    """Write ``executable`` and ``meta`` to ``path`` (a ``.tar``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / LIB_NAME
        executable.export_library(str(lib))
        (Path(tmp) / META_NAME).write_text(json.dumps(meta, indent=2))
        with tarfile.open(path, "w") as tar:
            tar.add(lib, LIB_NAME)
            tar.add(Path(tmp) / META_NAME, META_NAME)
    return path


def read_meta(path: str | Path) -> dict[str, Any]:
    """The JSON description of a compiled model, without loading its library."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"compiled model {str(path)!r} does not exist")
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile(META_NAME)
            if member is None:
                raise KeyError(META_NAME)
            return json.loads(member.read())
    except (tarfile.TarError, KeyError, json.JSONDecodeError) as err:
        raise ArtifactError(
            f"{str(path)!r} is not a tvm-hetero compiled model "
            f"(a .tar from `tvm-hetero compile`): {err}"
        ) from None


def load(path: str | Path, workdir: str | Path) -> Artifact:
    """Load a compiled model; the library is extracted into ``workdir``."""
    meta = read_meta(path)
    with tarfile.open(path) as tar:
        tar.extract(LIB_NAME, workdir, filter="data")
    return Artifact(tvm.runtime.load_module(str(Path(workdir) / LIB_NAME)), meta)
