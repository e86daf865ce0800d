"""CUDA kernels as device code, compiled when the library is exported.

TVM 0.27 keeps a CUDA module as CUDA C source (``fmt == "cuda"``) on a machine without the CUDA
driver, and compiles it when the library is *loaded*: through NVRTC or nvcc, from Python, with
``tvm.target.Target.current``, which lives in the compiler library. A GPU box with the TVM
runtime alone therefore cannot load such a library. Here the source is compiled with ``nvcc``
into one fat binary for every asked architecture (SASS for each, and PTX of the newest for
GPUs after it) and put in the library in the source's place, in the byte layout TVM's CUDA
loader reads (``[fmt][function table][code]``), so loading only hands the binary to the driver.

The library's imported modules travel as one blob, ``__tvm_ffi__library_bin``::

    <nbytes: u64> <indptr: vec<u64>> <children: vec<u64>> (<kind: str> [<bytes: str>])*

(``vec`` and ``str`` are a u64 count and the items; the ``_lib`` kind has no bytes: it is the
host code itself). :func:`export_library` writes that blob with the CUDA modules replaced, as an
object file beside the host code; :func:`device_code` reads it back from a ``.so``.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm

from tvm_hetero.build.multi_device import module_kinds
from tvm_hetero.devices.spec import arch_number
from tvm_hetero.errors import BuildError

LIBRARY_BIN = "__tvm_ffi__library_bin"
"""The symbol holding a library's imported modules (tvm-ffi's ``symbol::tvm_ffi_library_bin``)."""

FATBIN_MAGIC = 0xBA55ED50


def gencode_flags(archs: Sequence[str]) -> list[str]:
    """nvcc flags for SASS of every arch and PTX of the newest (for GPUs that come after it)."""
    ordered = sorted(set(archs), key=arch_number)
    flags = []
    for arch in ordered:
        compute = arch.replace("sm_", "compute_")
        code = f"[{arch},{compute}]" if arch == ordered[-1] else arch
        flags += ["-gencode", f"arch={compute},code={code}"]
    return flags


def compile_fatbin(source: str, archs: Sequence[str]) -> bytes:
    """Compile CUDA C source into a fat binary for ``archs`` with ``nvcc``.

    ``-O3``, without the ``--use_fast_math`` of TVM's own flags (``tvm.support.nvcc``): with
    it a transformers GPT-2 gave NaN in every output on an H200, without it it matches torch to
    1.5e-6 (``benchmarks/gpu/nan_probe.py``, 2026-11-28).

    Raises
    ------
    BuildError
        When ``nvcc`` is not on the PATH, or rejects the source.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise BuildError(
            "build: CUDA kernels are compiled to device code with nvcc, which is not on the "
            "PATH; install the CUDA toolkit (pip install nvidia-cuda-nvcc) or add it to PATH"
        )
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.fatbin"
        src.write_text(source)
        cmd = [nvcc, "--fatbin", "-O3", *gencode_flags(archs)]
        cmd += ["--expt-relaxed-constexpr", "-o", str(out), str(src)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise BuildError(f"build: nvcc failed on the CUDA kernels: {' | '.join(tail)}")
        return out.read_bytes()


# --- the library blob ------------------------------------------------------------------------


@dataclass
class LibraryBin:
    """A library's imported modules: the import tree (CSR) and ``(kind, bytes)`` per module."""

    indptr: list[int]
    children: list[int]
    modules: list[tuple[str, bytes | None]]

    @classmethod
    def parse(cls, blob: bytes) -> LibraryBin:
        """Parse a blob with its leading size."""
        (nbytes,) = struct.unpack_from("<Q", blob, 0)
        reader = _Reader(blob[8 : 8 + nbytes])
        indptr, children = reader.vec(), reader.vec()
        modules = []
        for _ in range(len(indptr) - 1):
            kind = reader.string().decode()
            modules.append((kind, None if kind == "_lib" else reader.string()))
        return cls(indptr, children, modules)

    def to_bytes(self) -> bytes:
        """The blob with its leading size."""
        body = [_vec(self.indptr), _vec(self.children)]
        for kind, data in self.modules:
            body.append(_str(kind.encode()))
            if data is not None:
                body.append(_str(data))
        payload = b"".join(body)
        return struct.pack("<Q", len(payload)) + payload


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def u64(self) -> int:
        (value,) = struct.unpack_from("<Q", self.data, self.pos)
        self.pos += 8
        return value

    def vec(self) -> list[int]:
        n = self.u64()
        values = list(struct.unpack_from(f"<{n}Q", self.data, self.pos))
        self.pos += 8 * n
        return values

    def string(self) -> bytes:
        n = self.u64()
        self.pos += n
        return self.data[self.pos - n : self.pos]


def _vec(values: Sequence[int]) -> bytes:
    return struct.pack(f"<Q{len(values)}Q", len(values), *values)


def _str(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def split_cuda_module(data: bytes) -> tuple[str, bytes, bytes]:
    """``(fmt, function table, code)`` of a CUDA module's bytes (the table left as bytes).

    The code is the last field; it starts at the first offset after the format whose u64
    length reaches exactly to the end and whose bytes are what the format says (a fat binary's
    magic, source with a kernel, PTX or an ELF cubin).
    """
    reader = _Reader(data)
    fmt = reader.string().decode()
    for end in range(reader.pos, len(data) - 7):
        (n,) = struct.unpack_from("<Q", data, end)
        if end + 8 + n == len(data) and _looks_like(fmt, data[end + 8 : end + 16]):
            return fmt, data[reader.pos : end], data[end + 8 :]
    raise BuildError(f"build: a CUDA module's bytes are not [fmt][table][code] (fmt {fmt!r})")


def _looks_like(fmt: str, head: bytes) -> bool:
    if fmt == "fatbin":
        return len(head) >= 4 and struct.unpack_from("<I", head)[0] == FATBIN_MAGIC
    if fmt == "cubin":
        return head.startswith(b"\x7fELF")
    return all(32 <= c < 127 or c in (9, 10, 13) for c in head)  # source or PTX text


def with_device_code(blob: bytes, archs: Sequence[str]) -> bytes:
    """The blob with every CUDA module holding source compiled into a fat binary for ``archs``."""
    library = LibraryBin.parse(blob)
    for i, (kind, data) in enumerate(library.modules):
        if kind != "cuda" or data is None:
            continue
        fmt, table, code = split_cuda_module(data)
        if fmt == "cuda":
            fatbin = compile_fatbin(code.decode(), archs)
            library.modules[i] = (kind, _str(b"fatbin") + table + _str(fatbin))
    return library.to_bytes()


def export_library(executable: Any, path: str | Path, archs: Sequence[str]) -> None:
    """Export ``executable`` (a ``tvm.runtime.Executable`` or module) to ``path`` with its CUDA
    kernels as device code for ``archs``."""
    module = executable.mod if isinstance(executable, tvm.runtime.Executable) else executable
    if "cuda" not in module_kinds(module):
        module.export_library(str(path))
        return
    export_with_blob(module, path, with_device_code(library_bin(module), archs))


def library_bin(module: tvm.runtime.Module) -> bytes:
    """The blob TVM would embed for ``module``'s imports."""
    pack = tvm.get_global_func("runtime.ModulePackImportsToTensor")
    return pack(module).numpy().tobytes()


def export_with_blob(module: tvm.runtime.Module, path: str | Path, blob: bytes) -> None:
    """Export ``module``'s host code to ``path`` with ``blob`` as its imported modules."""

    def pack_imports(_mod: Any, _system_lib: bool, prefix: str, workspace: str) -> str:
        return _blob_object(blob, prefix + LIBRARY_BIN, Path(workspace))

    module.export_library(str(path), fpack_imports=pack_imports)


def _blob_object(blob: bytes, symbol: str, folder: Path) -> str:
    """An object file defining ``symbol`` as ``blob`` (assembled, so size costs no C parsing)."""
    data, asm, obj = folder / "devc.bin", folder / "devc.S", folder / "devc.o"
    data.write_bytes(blob)
    asm.write_text(
        f"\t.section .rodata\n\t.globl {symbol}\n\t.type {symbol}, @object\n\t.p2align 4\n"
        f'{symbol}:\n\t.incbin "{data}"\n\t.size {symbol}, {len(blob)}\n'
        '\t.section .note.GNU-stack,"",@progbits\n'
    )
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run([cc, "-c", "-fPIC", str(asm), "-o", str(obj)], check=True)
    return str(obj)


class DeviceCodeExecutable(tvm.runtime.Executable):
    """An executable whose CUDA kernels are compiled to device code when it is exported: what
    :func:`~tvm_hetero.build.multi_device.build` returns for a module with CUDA kernels."""

    def __init__(self, mod: tvm.runtime.Module, archs: Sequence[str]) -> None:
        super().__init__(mod)
        self.archs = tuple(archs)

    def export_library(self, file_name: str | Path, **_kwargs: Any) -> None:
        """Write the library with device code for :attr:`archs` (:func:`export_library`)."""
        export_library(self.mod, file_name, self.archs)


# --- reading device code back ----------------------------------------------------------------


def read_library_bin(path: str | Path) -> bytes | None:
    """The ``__tvm_ffi__library_bin`` blob of a shared library (``None`` if it has none)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise BuildError(f"{str(path)!r} is not a 64-bit ELF shared library")
    shoff, shentsize, shnum = (
        struct.unpack_from("<Q", data, 0x28)[0],
        *struct.unpack_from("<HH", data, 0x3A),
    )
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)
    ]
    for sec in sections:
        if sec[1] not in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strtab = sections[sec[6]]
        for off in range(sec[4], sec[4] + sec[5], 24):
            name, _info, _other, _shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
            text = data[strtab[4] + name : data.index(b"\0", strtab[4] + name)]
            if text != LIBRARY_BIN.encode():
                continue
            for s in sections:  # the section holding the symbol's address
                if s[3] <= value < s[3] + s[5] and s[1] != 8:  # not SHT_NOBITS
                    start = s[4] + value - s[3]
                    return data[start : start + size]
    return None


def fatbin_entries(fatbin: bytes) -> list[tuple[str, int]]:
    """``[("sass", 80), ("sass", 90), ("ptx", 90)]``: what a fat binary holds, per entry."""
    magic, _version, header, size = struct.unpack_from("<IHHQ", fatbin, 0)
    if magic != FATBIN_MAGIC:
        raise BuildError("not a CUDA fat binary")
    out, pos = [], header
    while pos < header + size:
        kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", fatbin, pos)
        (sm,) = struct.unpack_from("<I", fatbin, pos + 28)
        out.append(({1: "ptx", 2: "sass"}.get(kind, str(kind)), sm))
        pos += entry_header + payload
    return out


def device_code(path: str | Path) -> list[tuple[str, list[tuple[str, int]]]]:
    """Per CUDA module of a shared library: its format and, for a fat binary, its entries."""
    blob = read_library_bin(path)
    if blob is None:
        return []
    out = []
    for kind, data in LibraryBin.parse(blob).modules:
        if kind == "cuda" and data is not None:
            fmt, _table, code = split_cuda_module(data)
            out.append((fmt, fatbin_entries(code) if fmt == "fatbin" else []))
    return out
