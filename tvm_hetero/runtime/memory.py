"""Memory: arrays into host tensors and back without TVM's slower copies; what the process has
freed, given back to the system."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from typing import Any

import numpy as np

from tvm_hetero.runtime.instrument import CPU_DEVICE

ALIGN = 64
"""The byte alignment TVM asks of a tensor it takes from DLPack (``FromDLPack``)."""


def tensor_on(array: np.ndarray, device: Any) -> Any:
    """``array`` copied into a tensor on ``device``: on the host, into a numpy buffer at
    :data:`ALIGN` bytes that the tensor then takes as its own memory (DLPack); a fifth of
    ``tvm.runtime.tensor``'s time for a small input (5 against 25 us, AMD EPYC), which
    ``Executor.run`` paid each input, each run. Elsewhere, or a type DLPack lacks: TVM's."""
    import tvm

    if device.dlpack_device_type() == CPU_DEVICE:
        buffer = np.empty(array.nbytes + ALIGN, np.uint8)
        at = -buffer.ctypes.data % ALIGN
        view = buffer[at : at + array.nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(view, array)
        with contextlib.suppress(BufferError, TypeError, RuntimeError, ValueError):
            return tvm.runtime.from_dlpack(view)
    return tvm.runtime.tensor(array, device)


def array_of(tensor: Any) -> np.ndarray:
    """``tensor`` copied out into a numpy array of its own: on the host, from its DLPack view
    (a tenth of ``Tensor.numpy``'s time for a small output, 1 against 10 us, AMD EPYC, which
    ``Executor.run`` paid each output, each run); elsewhere, or a type numpy lacks, TVM's."""
    if tensor.device.dlpack_device_type() == CPU_DEVICE:
        with contextlib.suppress(BufferError, TypeError, RuntimeError, ValueError):
            return np.from_dlpack(tensor).copy()
    return tensor.numpy()


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
