"""Discover this machine's devices and resolve device names as the CLI writes them."""

from __future__ import annotations

import os
from collections.abc import Sequence

import psutil

from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.devices.spec import DeviceKind, DeviceSpec, SpecError

DEFAULT_CUDA_ARCH = "sm_90"
"""Arch used to compile for a GPU that is not on this machine (the lent H100 / H200 machines)."""


SERIAL_CPU = "cpu-serial"
"""The CLI name of the single-threaded CPU (Lee et al.'s CPU_S): kernels without parallel loops."""
SERIAL_INDEX = 1
"""``cpu-serial`` is vdevice ``llvm:1`` (the same CPU as ``llvm:0``, other kernels)."""


def local_class(device: DeviceSpec, root: str | None = None) -> str:
    """``device``'s compute class (:attr:`DeviceSpec.compute_class`) with, for a CPU device of
    this process pinned to cores of a machine of several kinds of core, their kind
    (:func:`~tvm_hetero.runtime.device.core_mark`): two core sets of a big.LITTLE board (or of
    a CPU of performance and efficiency cores) share a target and a thread count, not a
    rate."""
    if device.kind is not DeviceKind.CPU or device.host is not None or device.cores is None:
        return device.compute_class
    from tvm_hetero.runtime.device import core_mark  # imports TVM: a worker imports it first

    mark = core_mark(device.cores, root)
    return f"{device.compute_class}|{mark}" if mark else device.compute_class


CORESET_INDEX_BASE = 64
"""``cpu@A-B`` is vdevice ``llvm:(64 + A)``: disjoint core sets never share a vdevice id, and
none is taken by ``cpu:N`` or ``cpu-serial``."""


def cpu_device(
    index: int = 0, threads: int | None = None, cores: tuple[int, ...] | None = None
) -> DeviceSpec:
    """This machine's CPU as vdevice ``index`` (``cpu``, ``cpu:1``...), named to LLVM.

    The target names the CPU (``mcpu``) with the plain Linux triple: with the wheel's default
    triple LLVM silently drops ``mcpu=native``. ``threads`` defaults to every core; TVM itself
    would use half. The target's ``num-cores`` is ``threads``: with 1 the CPU rules emit no
    parallel loop, which makes ``cpu_device(threads=1)`` the serial CPU (``cpu-serial``).
    ``cores`` pins the device's worker to those cores with one thread each (``cpu@2-5``).
    """
    from tvm_hetero._compat import HOST_TRIPLE, host_cpu_name

    serial = threads == 1 and cores is None
    threads = len(cores) if cores else threads or os.cpu_count() or 1
    target = {"kind": "llvm", "mtriple": HOST_TRIPLE, "mcpu": host_cpu_name(), "num-cores": threads}
    if cores:
        first, last = cores[0], cores[-1]
        name = f"cpu@{first}" if first == last else f"cpu@{first}-{last}"
        return DeviceSpec(
            name, DeviceKind.CPU, target, CORESET_INDEX_BASE + first,
            psutil.virtual_memory().total, threads, cores=tuple(cores),
        )  # fmt: skip
    if serial:
        name = SERIAL_CPU if index == SERIAL_INDEX else f"{SERIAL_CPU}:{index}"
    else:
        name = "cpu" if index == 0 else f"cpu:{index}"
    return DeviceSpec(name, DeviceKind.CPU, target, index, psutil.virtual_memory().total, threads)


def merged_cpu(devices: Sequence[DeviceSpec]) -> DeviceSpec | None:
    """One CPU worker on every core of ``devices`` (``cpu@0`` + ``cpu@1`` -> ``cpu@0-1``), when
    they are all this host's own CPU workers (``cpu@...``) on contiguous core sets; else
    ``None`` (workers a cluster file names may be another machine's). What a plan over CPU
    workers falls back to when splitting the model does not pay."""
    if len(devices) < 2 or any(
        d.kind is not DeviceKind.CPU or d.cores is None or d.host is not None
        or d.name != cpu_device(cores=d.cores).name
        for d in devices
    ):  # fmt: skip
        return None
    cores = sorted(c for d in devices for c in d.cores)  # type: ignore[union-attr]
    if cores != list(range(cores[0], cores[-1] + 1)):
        return None
    return cpu_device(cores=tuple(cores))


def cuda_device(index: int = 0, arch: str | None = None) -> DeviceSpec:
    """CUDA GPU ``index``: arch and memory from the GPU when present, else ``arch`` / sm_90."""
    import tvm

    from tvm_hetero.runtime.cuda import cuda_runtime_error

    cuda_runtime_error()
    dev = tvm.cuda(index)
    memory = None
    if dev.exist:
        arch = arch or "sm_" + str(dev.compute_version).replace(".", "")
        memory = int(dev.total_global_memory)
    target = {"kind": "cuda", "arch": arch or DEFAULT_CUDA_ARCH, "host": {"kind": "llvm"}}
    return DeviceSpec(f"cuda:{index}", DeviceKind.CUDA, target, index, memory)


def gpu_count() -> int:
    """Number of CUDA GPUs TVM can see."""
    import tvm

    from tvm_hetero.runtime.cuda import cuda_runtime_error

    if cuda_runtime_error() is not None:
        return 0
    n = 0
    while n < 16 and tvm.cuda(n).exist:
        n += 1
    return n


def discover() -> list[DeviceSpec]:
    """The devices of this machine: the CPU always, each CUDA GPU when present."""
    return [cpu_device(), *(cuda_device(i) for i in range(gpu_count()))]


def _kind_index(text: str) -> tuple[str, int] | None:
    """``("cpu" | "cuda", index)`` of a plain device name (``cpu``, ``llvm:1``, ``cuda``,
    ``gpu:0``), ``None`` for any other (``cpu@1``, ``cpu-serial``, a cluster's names)."""
    kind, _, index_text = text.partition(":")
    if kind not in ("cpu", "llvm", "cuda", "gpu") or not (index_text == "" or index_text.isdigit()):
        return None
    return ("cuda" if kind in ("cuda", "gpu") else "cpu"), int(index_text or 0)


def device_name(text: str) -> str:
    """The name a device written as ``text`` has: ``cuda``, ``gpu`` and ``cuda:0`` are all
    ``cuda:0``; ``llvm`` and ``cpu:0`` are ``cpu``; anything else (``cpu@1``, a cluster's
    names) is itself."""
    found = _kind_index(text)
    if found is None:
        return text
    kind, index = found
    if kind == "cuda":
        return f"cuda:{index}"
    return "cpu" if index == 0 else f"cpu:{index}"


def resolve_device(
    text: str, cluster: ClusterSpec | None = None, cuda_arch: str | None = None
) -> DeviceSpec:
    """A device as the command line writes it: ``cpu``, ``cpu:1``, ``cpu@1`` / ``cpu@2-5`` (a
    worker pinned to those cores), ``cpu-serial``, ``cuda``, ``cuda:0`` or a name from the
    cluster file.
    """
    if cluster is not None and any(d.name == text for d in cluster.devices):
        return cluster.device(text)
    if text.startswith("cpu@"):
        from tvm_hetero.runtime.device import parse_core_set

        return cpu_device(cores=parse_core_set(text[4:], f"device {text!r}"))
    found = _kind_index(text)
    if found is not None:
        kind, index = found
        return cpu_device(index) if kind == "cpu" else cuda_device(index, cuda_arch)
    kind, _, index_text = text.partition(":")
    if kind == SERIAL_CPU and (index_text == "" or index_text.isdigit()):
        return cpu_device(int(index_text or SERIAL_INDEX), threads=1)
    names = f"; cluster devices: {[d.name for d in cluster.devices]}" if cluster else ""
    raise SpecError(
        f"unknown device {text!r}: write cpu, cpu:N, cpu@N, cpu@A-B, {SERIAL_CPU}, cuda or "
        f"cuda:N{names}"
    )
