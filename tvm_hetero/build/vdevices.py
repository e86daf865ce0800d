"""Map device specs to Relax VDevices and to runtime devices, in vdevice order."""

from __future__ import annotations

from collections.abc import Sequence

import tvm

from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.devices.spec import DeviceKind, DeviceSpec, SpecError


def to_vdevice(spec: DeviceSpec) -> VDevice:
    """The VDevice a spec compiles for."""
    if spec.kind is DeviceKind.SIMULATED:
        raise SpecError(
            f"device {spec.name!r} is simulated (profile {spec.profile!r}); it has no TVM target "
            "to compile for, only costs for planners"
        )
    return VDevice(make_target(spec.target), spec.index, "global")


def vdevices_of(specs: Sequence[DeviceSpec]) -> list[VDevice]:
    """VDevices of ``specs`` in order."""
    return [to_vdevice(s) for s in specs]


def runtime_device(kind: str, index: int) -> tvm.runtime.Device:
    """The runtime device of a target kind (``llvm`` / ``cuda``) and index.

    Raises
    ------
    SpecError
        For a CUDA device that this machine does not have.
    """
    if kind == "cuda":
        dev = tvm.cuda(index)
        if not dev.exist:
            raise SpecError(
                f"cuda:{index} is not present on this machine (no CUDA GPU visible to TVM); "
                "compile here and run where the GPU is"
            )
        return dev
    if kind == "llvm":
        return tvm.cpu(index)
    raise SpecError(f"no runtime device for target kind {kind!r}")


def runtime_devices(mod_vdevices: Sequence[VDevice]) -> list[tvm.runtime.Device]:
    """Runtime devices in vdevice order, the list ``relax.VirtualMachine`` expects."""
    return [runtime_device(str(v.target.kind.name), int(v.vdevice_id)) for v in mod_vdevices]
