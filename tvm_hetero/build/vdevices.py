"""Map device specs to Relax VDevices (and a one-VM build's vdevices to runtime devices)."""

from __future__ import annotations

import dataclasses
import os
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
    """VDevices of ``specs`` in order.

    A device on a remote worker is that worker's own device (its ``index`` counts there, not
    here), so it takes the next vdevice id its kind has free: two boxes' ``cpu`` are two vdevices.
    """
    taken = {(s.kind, s.index) for s in specs if s.host is None}
    out = []
    for spec in specs:
        index = spec.index
        if spec.host is not None:
            index = next(i for i in range(len(specs) + 1) if (spec.kind, i) not in taken)
            taken.add((spec.kind, index))
        out.append(to_vdevice(dataclasses.replace(spec, index=index)))
    return out


def runtime_devices(mod_vdevices: Sequence[VDevice]) -> list[tvm.runtime.Device]:
    """Runtime devices in vdevice order, the list a one-VM ``VirtualMachine`` expects."""
    from tvm_hetero.runtime.device import vdevice_runtime_device

    return [
        vdevice_runtime_device(str(v.target.kind.name), int(v.vdevice_id)) for v in mod_vdevices
    ]


def cpu_threads(mod_vdevices: Sequence[VDevice]) -> int:
    """The widest CPU vdevice's ``num-cores``: the pool one VM over them needs (every core when
    a CPU target does not say)."""
    widths = [
        int(v.target.attrs.get("num-cores", 0)) or os.cpu_count() or 1
        for v in mod_vdevices
        if str(v.target.kind.name) == "llvm"
    ]
    return max(widths, default=1)
