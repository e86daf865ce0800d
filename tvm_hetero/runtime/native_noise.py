"""TVM's C++ log lines that tell a user nothing, kept off the process's stderr."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def without_native_lines(*noise: str) -> Iterator[None]:
    """Run the body with the process's stderr (file descriptor 2: TVM's C++ logging) caught,
    then write back every line of it except those containing one of ``noise``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().decode(errors="replace").splitlines()
            kept = [line for line in lines if not any(n in line for n in noise)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
