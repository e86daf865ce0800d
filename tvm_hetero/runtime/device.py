"""Device specs to runtime devices, and CPU core sets (``cpu@0``, ``cpu@2-5``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import tvm

from tvm_hetero.devices.spec import DeviceKind, DeviceSpec, SpecError
from tvm_hetero.records import Fingerprint, cpu_model
from tvm_hetero.runtime.cuda import cuda_device


def runtime_device(spec: DeviceSpec) -> tvm.runtime.Device:
    """The device a worker of ``spec`` runs on in this process.

    Every CPU device (``cpu``, ``cpu:1``, ``cpu@1``) is ``tvm.cpu(0)``: they share the host's
    memory, so tensors pass between CPU workers without a copy; what tells them apart is the
    worker's cores and threads.

    Raises
    ------
    SpecError
        For a simulated device, or a CUDA device this machine does not have.
    """
    if spec.kind is DeviceKind.CPU:
        missing = sorted(set(spec.cores or ()) - usable_cores())
        if missing:
            raise SpecError(
                f"{spec.name}: core {missing[0]} does not exist here (or is not this process's "
                f"to use); this machine has cores {sorted(usable_cores())}"
            )
        return tvm.cpu(0)
    if spec.kind is DeviceKind.CUDA:
        try:
            return cuda_device(spec.index)
        except SpecError as err:
            if spec.name == f"cuda:{spec.index}":
                raise
            raise SpecError(f"{spec.name}: {err}") from None
    raise SpecError(f"{spec.name}: a simulated device cannot run code (it only has costs)")


def cache_home() -> Path:
    """Where tvm-hetero keeps what it learned on this machine (built helpers, measured
    choices): ``$XDG_CACHE_HOME/tvm-hetero``, else ``~/.cache/tvm-hetero``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tvm-hetero"


def usable_cores() -> set[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def vdevice_runtime_device(kind: str, index: int) -> tvm.runtime.Device:
    """The runtime device of one vdevice (``llvm`` / ``cuda`` and its index) in a one-VM build."""
    if kind == "llvm":
        return tvm.cpu(index)
    if kind == "cuda":
        return cuda_device(index)
    raise SpecError(f"no runtime device for target kind {kind!r}")


def parse_core_set(text: str, where: str) -> tuple[int, ...]:
    """``"2-5"`` -> ``(2, 3, 4, 5)``, ``"1"`` -> ``(1,)``, checked against this machine's cores.

    Raises
    ------
    SpecError
        Naming ``where`` (the device as written) and the cores this machine has.
    """
    count = os.cpu_count() or 1
    allowed = f"cores 0-{count - 1}" if count > 1 else "core 0"
    lo, dash, hi = text.partition("-")
    if not lo.isdigit() or (dash and not hi.isdigit()):
        raise SpecError(f"{where}: write cpu@N or cpu@A-B with core numbers ({allowed} here)")
    first, last = int(lo), int(hi) if dash else int(lo)
    if first > last:
        raise SpecError(f"{where}: the range {first}-{last} is empty; write the lower core first")
    if last >= count:
        raise SpecError(f"{where}: core {last} does not exist; this machine has {allowed}")
    return tuple(range(first, last + 1))


def check_disjoint(specs: list[DeviceSpec]) -> None:
    """Refuse CPU core sets of one host that overlap: two workers on one core do not run at the
    same time. (Workers of different hosts have their own cores, or share them on purpose in an
    emulated cluster.)"""
    owner: dict[tuple[str | None, int], str] = {}
    for spec in specs:
        for core in spec.cores or ():
            if (spec.worker_id, core) in owner:
                raise SpecError(
                    f"devices {owner[spec.worker_id, core]!r} and {spec.name!r} both use core "
                    f"{core}; give each worker its own cores (cpu@0, cpu@1, cpu@2-5)"
                )
            owner[spec.worker_id, core] = spec.name
    pinned = [s for s in specs if s.kind is DeviceKind.CPU and s.cores and s.host is None]
    unpinned = [s for s in specs if s.kind is DeviceKind.CPU and not s.cores and s.host is None]
    if pinned and unpinned:  # a worker on every core beside one on some of them
        raise SpecError(
            f"devices {unpinned[0].name!r} (every core) and {pinned[0].name!r} (cores "
            f"{','.join(map(str, pinned[0].cores))}) overlap; give each CPU worker its own "
            "cores (cpu@0, cpu@1, cpu@2-5)"
        )


SYSFS_CPU = "/sys/devices/system/cpu"
"""Where the kernel describes each core (``cpuN/cpu_capacity``, ``cpuN/cpufreq``)."""


@functools.cache
def _every_core_kind(root: str) -> dict[int, str]:
    """:func:`core_kinds` of every core under ``root``, read once a process: a profile lookup
    asks the fingerprint, which asks :func:`core_mark`, each time."""
    folder = Path(root)

    def read(core: int, name: str) -> str:
        try:
            return (folder / f"cpu{core}" / name).read_text().strip()
        except OSError:
            return ""

    every = sorted(int(p.name[3:]) for p in folder.glob("cpu[0-9]*") if p.name[3:].isdigit())
    return {
        c: ":".join((read(c, "cpu_capacity"), read(c, "cpufreq/cpuinfo_max_freq"))).strip(":")
        for c in every
    }


def core_kinds(cores: Sequence[int], root: str | None = None) -> tuple[str, ...]:
    """What this machine's kernel says of each of ``cores`` that tells a big core from a little
    one (its ``cpu_capacity`` and highest clock, where sysfs has them; ``""`` where it says
    neither), in order; ``root``: :data:`SYSFS_CPU`."""
    every = _every_core_kind(str(root or SYSFS_CPU))
    return tuple(every.get(c, "") for c in cores)


def core_mark(cores: Sequence[int], root: str | None = None) -> str:
    """What sets ``cores`` apart from this machine's other cores: their kinds
    (:func:`core_kinds`) where its cores are not all of one kind (a big.LITTLE board, a CPU of
    performance and efficiency cores), else ``""`` (so records and classes of a machine of one
    kind of core stay as they were)."""
    every = _every_core_kind(str(root or SYSFS_CPU))
    if len(set(every.values()) - {""}) <= 1:  # a core it says nothing of: offline
        return ""
    return ",".join(sorted(set(core_kinds(cores, root))))


def local_fingerprint(
    kind: str, index: int = 0, threads: int | None = None, llvm_cpu: str = "",
    cores: Sequence[int] | None = None,
) -> Fingerprint:  # fmt: skip
    """Fingerprint of a device of this process (``kind`` ``cpu`` or ``cuda``); a CPU device
    pinned to ``cores`` of a machine of several kinds of core names their kind
    (:func:`core_mark`): a big core's records are not a little one's."""
    if kind == "cuda":
        from tvm_hetero.runtime.cuda import cuda_runtime_error

        cuda_runtime_error()  # a runtime-only process loads TVM's CUDA runtime first
        dev = tvm.cuda(index)
        name = str(dev.device_name) if dev.exist else f"cuda:{index} (absent)"
        return Fingerprint("cuda", name, None, tvm.__version__)
    threads = threads or int(os.environ.get("TVM_NUM_THREADS", 0)) or os.cpu_count()
    name = f"{cpu_model()} [{llvm_cpu}]" if llvm_cpu else cpu_model()
    mark = core_mark(cores) if cores else ""
    name += f" cores {mark}" if mark else ""
    return Fingerprint("cpu", name, threads, tvm.__version__)
