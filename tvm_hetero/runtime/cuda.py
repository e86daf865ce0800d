"""TVM's CUDA runtime in a process that has only the TVM runtime.

``import tvm`` with the runtime alone (``TVM_USE_RUNTIME_LIB=1``, or a box without the compiler
library: what the bundle of ``tvm-hetero bundle`` installs) never loads
``libtvm_runtime_cuda.so``: ``tvm.cuda(0).exist`` is ``False`` on a GPU box and no library with
CUDA kernels loads (its loader, ``ffi.Module.load_from_bytes.cuda``, lives there). This loads it
the way TVM's own CUDA backend does when the compiler is present. The kernels need no compiler
once there: the build compiles them to device code (``build/cuda_binary.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import tvm_ffi

DEVICE_API = "device_api.cuda"
LOADER = "ffi.Module.load_from_bytes.cuda"


@functools.cache
def cuda_runtime_error() -> str | None:
    """``None`` once TVM's CUDA runtime is loaded in this process; else why it cannot be (on a
    machine without the CUDA driver: ``libcuda.so.1`` cannot be opened)."""
    if tvm_ffi.get_global_func(DEVICE_API, allow_missing=True) is not None:
        return None
    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    runtime_dir = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    try:
        _LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(
            package="tvm",
            target_name="tvm_runtime_cuda",
            extra_lib_paths=[runtime_dir],
            mode="RTLD_LOCAL",
        )
    except (OSError, FileNotFoundError, RuntimeError) as err:
        return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return None


def cuda_device(index: int):  # -> tvm.runtime.Device
    """``tvm.cuda(index)`` after loading the CUDA runtime.

    Raises
    ------
    SpecError
        When the GPU is not there, naming why (no CUDA runtime, or no such GPU).
    """
    import tvm

    from tvm_hetero.devices.spec import SpecError

    why = cuda_runtime_error()
    dev = tvm.cuda(index)
    if why is None and dev.exist:
        return dev
    reason = f"TVM's CUDA runtime did not load: {why}" if why else "no such CUDA GPU"
    raise SpecError(
        f"cuda:{index} is not present on this machine ({reason}); compile here and run where "
        "the GPU is"
    )


def runs_on(archs: Sequence[str], compute_version: str) -> bool:
    """Whether device code built for ``archs`` (SASS for each, PTX of the newest: what the build
    writes) runs on a GPU of ``compute_version`` (``"9.0"``): SASS runs on its major version at
    an equal or later minor (``sm_90a`` on 9.0 alone), PTX on its version and every later one."""
    from tvm_hetero.devices.spec import arch_number

    major, minor = (int(p) for p in compute_version.split(".")[:2])
    gpu = 10 * major + minor
    newest = max(archs, key=arch_number)
    for arch in archs:
        n = arch_number(arch)
        specific = arch.endswith("a")
        if (gpu == n) if specific else (n // 10 == major and n % 10 <= minor):
            return True
    return (gpu == arch_number(newest)) if newest.endswith("a") else gpu >= arch_number(newest)


def check_device_code(name: str, device, archs: Sequence[str]) -> None:
    """Refuse, before loading it, device code that cannot run on ``device`` (a GPU); the
    message names the archs and the ``--cuda-arch`` that would."""
    from tvm_hetero.devices.spec import SpecError

    version = str(device.compute_version)
    if archs and not runs_on(archs, version):
        here = "sm_" + version.replace(".", "")
        raise SpecError(
            f"{name}: compiled for {', '.join(archs)}, which this GPU ({here}) cannot run; "
            f"compile again with --cuda-arch {here}"
        )
