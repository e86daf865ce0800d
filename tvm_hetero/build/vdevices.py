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


def vdevice_clash(specs: Sequence[DeviceSpec]) -> str | None:
    """What is wrong where two devices of this process would be one vdevice to TVM (one kind
    and ``index``: two CPUs of a cluster file given cores but no index): ``"'a' and 'b' are
    both cpu:0 to TVM; ..."``, None where none are. A device on a remote worker takes a free id
    (:func:`vdevices_of`); a simulated one has none."""
    seen: dict[tuple[DeviceKind, int], str] = {}
    for spec in specs:
        if spec.host is not None or spec.kind is DeviceKind.SIMULATED:
            continue
        key = (spec.kind, int(spec.index))
        if key in seen:
            return (f"{seen[key]!r} and {spec.name!r} are both {spec.kind.value}:{key[1]} to "
                    'TVM; give each a distinct "index"')  # fmt: skip
        seen[key] = spec.name
    return None


def vdevices_of(specs: Sequence[DeviceSpec]) -> list[VDevice]:
    """VDevices of ``specs`` in order.

    A device on a remote worker is that worker's own device (its ``index`` counts there, not
    here), so it takes the next vdevice id its kind has free: two boxes' ``cpu`` are two vdevices.

    Raises
    ------
    SpecError
        When two devices of this process would be one vdevice (:func:`vdevice_clash`).
    """
    clash = vdevice_clash(specs)
    if clash is not None:
        raise SpecError(f"devices {clash}")
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
