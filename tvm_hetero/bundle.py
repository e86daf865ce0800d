"""The folder a GPU or edge box needs: compiled models, the TVM runtime alone, our runtime.

Compile here (the compiler is 250 MB and the box may have none), carry the bundle, run there::

    tvm-hetero bundle lstm.tar offline/ -o box/          # or -o box.tar.xz
    box/tvm-hetero run box/artifacts/lstm.tar --print-time        # on the box
    box/tvm-hetero measure box/artifacts/offline                  # time offline workloads

``site/`` holds TVM without its compiler library, sources and third-party headers (as
``shared/tools/gpu-runtime-bundle.sh`` makes it), tvm-ffi for the box's Python (downloaded from
the package index when that is not this Python), this package, and the pure-Python packages
the run path imports. The launcher puts ``site/`` first on ``PYTHONPATH`` and sets
``TVM_USE_RUNTIME_LIB=1``. The box brings Python and numpy.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

TVM_LEFT_OUT = ("lib/libtvm_compiler.so", "3rdparty", "src", "include")
"""What the runtime does not need of the TVM package (the compiler is 248 of its 305 MB)."""

PURE_PYTHON = ("rich", "markdown_it", "mdurl", "pygments", "typing_extensions", "psutil")
"""Packages the run path imports besides TVM and numpy (psutil's extension is abi3: any
Python 3 takes it)."""

LAUNCHER = """#!/bin/sh
# tvm-hetero with the TVM runtime alone (what this bundle holds); PYTHON picks the interpreter.
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/site${PYTHONPATH:+:$PYTHONPATH}" TVM_USE_RUNTIME_LIB=1
exec "${PYTHON:-python3}" -m tvm_hetero.cli.main "$@"
"""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"package {name!r} is not installed here")
    origin = Path(spec.origin)
    return origin.parent if origin.name == "__init__.py" else origin


def _copy_package(name: str, site: Path, leave_out: Sequence[str] = ()) -> None:
    source = _package_dir(name)
    if source.is_file():  # a single-module package (typing_extensions.py)
        shutil.copy2(source, site / source.name)
        return
    skip = {source / p for p in leave_out}

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or Path(folder) / n in skip]

    shutil.copytree(source, site / name, ignore=ignore)


def _tvm_ffi_for(python: str, site: Path) -> None:
    """tvm-ffi (a compiled extension) for Python ``python`` (``3.12``)."""
    if python == f"{sys.version_info.major}.{sys.version_info.minor}":
        _copy_package("tvm_ffi", site)
        return
    version = importlib.metadata.version("apache-tvm-ffi")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", python, "--implementation", "cp",
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
            "-d", tmp, f"apache-tvm-ffi=={version}",
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            why = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
            raise ValueError(f"--python {python}: no apache-tvm-ffi=={version} wheel ({why[0]})")
        with zipfile.ZipFile(wheels[0]) as wheel:
            for member in wheel.namelist():
                if member.startswith("tvm_ffi/"):
                    wheel.extract(member, site)


def make_bundle(
    artifacts: Sequence[str | Path], output: str | Path, python: str,
    progress: Callable[[str], None] = lambda _: None,
) -> Path:  # fmt: skip
    """Write the bundle to ``output``: a folder, or a ``.tar.xz`` of one. Nothing is left at
    ``output`` if this fails."""
    output = Path(output)
    archive = output.name.endswith(".tar.xz")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / (output.name.removesuffix(".tar.xz") if archive else output.name)
        site, stage = root / "site", root / "artifacts"
        site.mkdir(parents=True)
        stage.mkdir()
        progress("TVM runtime")
        _copy_package("tvm", site, TVM_LEFT_OUT)
        progress(f"tvm-ffi for Python {python}")
        _tvm_ffi_for(python, site)
        progress("tvm-hetero and the run path's packages")
        _copy_package("tvm_hetero", site)
        for name in PURE_PYTHON:
            _copy_package(name, site)
        for artifact in map(Path, artifacts):
            progress(f"artifact {artifact.name}")
            if artifact.is_dir():
                shutil.copytree(artifact, stage / artifact.name)
            else:
                shutil.copy2(artifact, stage / artifact.name)
        launcher = root / "tvm-hetero"
        launcher.write_text(LAUNCHER)
        launcher.chmod(0o755)
        partial = output.with_name(output.name + ".partial")
        if archive:
            progress("packing")
            with tarfile.open(partial, "w:xz") as tar:
                tar.add(root, root.name)
        else:
            shutil.copytree(root, partial, symlinks=True)
        partial.rename(output)
    return output
