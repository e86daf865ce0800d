"""C helpers of the runtime (``native/*.c``), built with the system's C compiler at first use
and cached: the native programs, the remote programs, the claiming pool."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from tvm_hetero.runtime.device import cache_home


def _cache_dir() -> Path:
    return cache_home() / "native"


def build_native(source: Path) -> Path:
    """The shared library of ``source``, built once per source (with the headers beside it),
    TVM FFI and compiler."""
    from tvm_ffi import libinfo

    compiler = os.environ.get("CC", "cc")
    ffi_lib = Path(libinfo.find_libtvm_ffi())
    text = b"".join(p.read_bytes() for p in (source, *sorted(source.parent.glob("*.h"))))
    key = hashlib.sha256(text + str(ffi_lib).encode() + compiler.encode()).hexdigest()[:16]
    out = _cache_dir() / f"{source.stem}-{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    includes = [libinfo.find_include_path(), libinfo.find_dlpack_include_path()]
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        built = Path(tmp) / out.name
        cmd = [compiler, "-O2", "-std=c11", "-shared", "-fPIC", *(f"-I{p}" for p in includes),
               str(source), "-o", str(built), f"-L{ffi_lib.parent}", "-ltvm_ffi",
               f"-Wl,-rpath,{ffi_lib.parent}"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"{compiler} failed: {done.stderr.strip()[-300:]}")
        os.replace(built, out)  # whole, even with another process building the same
    return out
