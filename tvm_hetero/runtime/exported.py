"""Executables exported to shared libraries once per process, for remote workers to load.

A remote worker loads its units from a ``.so`` uploaded to it, and an executable in memory is
exported to one first (TVM's ``export_library``: its code and its weights written out and
linked by the system's compiler). For a model of GPT-2's size that export took minutes, and a
search made it again for every worker that ran the same build (a cluster's like devices share
one build, ``optimize`` times each alone) and for every executor made from it. Here each
executable is exported once; the file lives as long as the executable and the process do.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

_files: weakref.WeakKeyDictionary[Any, Path] = weakref.WeakKeyDictionary()
_lock = threading.Lock()  # exports run one at a time: two workers of one build wait for one
_folder: list[Path] = []
_names = itertools.count()


def exported_library(executable: Any) -> Path:
    """The shared library of ``executable`` (a ``tvm.runtime.Executable``), exported at the
    first call for it and removed when it is collected (or the process ends)."""
    with _lock:
        found = _files.get(executable)
        if found is not None and found.exists():
            return found
        if not _folder:
            _folder.append(Path(tempfile.mkdtemp(prefix="tvm-hetero-exports-")))
            atexit.register(shutil.rmtree, _folder[0], True)
        path = _folder[0] / f"lib{next(_names)}.so"
        executable.export_library(str(path))
        _files[executable] = path
        weakref.finalize(executable, path.unlink, True)
        return path
