"""DeclareVDevices: set the module's virtual-device list (``global_infos["vdevice"]``)."""

from __future__ import annotations

from collections.abc import Sequence

import tvm
from tvm.ir import IRModule

from tvm_hetero._compat import VDevice


@tvm.transform.module_pass(opt_level=0, name="DeclareVDevices")
class DeclareVDevices:
    """Declare the virtual devices later passes place operators on.

    Parameters
    ----------
    vdevices : Sequence[VDevice]
        The devices in order; index 0 is the home device. Two entries may share a target only
        with different ``vdevice_id`` (``llvm:0``, ``llvm:1``).

    Notes
    -----
    Postcondition: ``mod.global_infos["vdevice"]`` is exactly ``vdevices``. A module that already
    declares a different list is rejected, since its annotations would change meaning.
    """

    def __init__(self, vdevices: Sequence[VDevice]) -> None:
        if not vdevices:
            raise ValueError("DeclareVDevices: vdevices must list at least one VDevice")
        keys = [(str(v.target.kind.name), int(v.vdevice_id)) for v in vdevices]
        dupes = sorted({f"{k}:{i}" for k, i in keys if keys.count((k, i)) > 1})
        if dupes:
            raise ValueError(
                f"DeclareVDevices: vdevice(s) {dupes} declared twice; give each a distinct index"
            )
        self.vdevices = list(vdevices)

    def transform_module(self, mod: IRModule, _ctx: tvm.transform.PassContext) -> IRModule:
        """Return a copy of ``mod`` with the vdevice list set."""
        existing = list(mod.global_infos.get("vdevice", []))
        if existing and [str(v) for v in existing] != [str(v) for v in self.vdevices]:
            raise ValueError(
                f"DeclareVDevices: module already declares vdevices {[str(v) for v in existing]}; "
                f"refusing to replace them with {[str(v) for v in self.vdevices]}"
            )
        out = mod.clone()
        out.update_global_info("vdevice", self.vdevices)
        return out
