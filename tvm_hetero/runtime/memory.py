"""Memory the process has freed, given back to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _trim() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def give_back_freed_memory() -> None:
    """Return freed memory to the system: the buffers TVM's virtual machines gave back to its
    pools (``vm.builtin.memory_manager.clear`` frees only those no one holds), then the C
    allocator's free pages (glibc's ``malloc_trim``; nothing elsewhere). Arrays of a few MiB
    come from the allocator's heap, whose freed middle it keeps: loading ViT-Base (0.32 GiB of
    weights, made as numpy arrays and copied into TVM tensors) left 0.65 GiB resident, 0.33
    after this; Lee et al.'s profiling runs of it left 0.47 GiB, 0.37 of it in TVM's pools."""
    import tvm

    clear = tvm.get_global_func("vm.builtin.memory_manager.clear", allow_missing=True)
    if clear is not None:
        clear()
    trim = _trim()
    if trim is not None:
        trim(0)  # type: ignore[operator]


def available_bytes() -> int | None:
    """Memory the system can give without swapping (``MemAvailable``), or None where it does
    not say."""
    try:
        with open("/proc/meminfo") as info:
            fields = dict(line.split(":", 1) for line in info)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
