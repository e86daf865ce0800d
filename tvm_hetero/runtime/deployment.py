"""The executable format: units on devices, the copies between them, the home inputs and outputs.

A deployment is a dataflow program over named values. Its steps, in a valid order, are

- ``unit``: call function ``function`` of device ``device``'s library on the input values; its
  result is one value (a tensor, or a tuple when the unit returns several);
- ``copy``: the value ``src`` moved to device ``device`` (nothing to do between two CPU workers,
  which share the host's memory);
- ``item``: element ``index`` of a tuple value.

Values ``inputs`` are given on the home device (``devices[0]``); ``outputs`` are returned. A model
compiled for one device is one unit, ``main``. Saved as a ``.tar``: ``manifest.json`` (the full
device specs with their targets, the steps, the inputs, the plan) and one library per device
(``lib{k}.so``), so loading never rebuilds anything by hand.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tvm_hetero.devices.spec import DeviceSpec, SpecError
from tvm_hetero.runtime import claiming_pool
from tvm_hetero.runtime.inputs import InputSpec
from tvm_hetero.runtime.manifest import ArtifactError, check_manifest
from tvm_hetero.runtime.native_noise import without_native_lines

MANIFEST = "manifest.json"
FORMAT = "tvm-hetero-deployment"
VERSION = 1


@dataclass(frozen=True)
class Step:
    """One step of a deployment (see the module docstring for the kinds)."""

    kind: str
    name: str
    inputs: tuple[str, ...]
    device: int | None = None
    function: str | None = None
    index: int | None = None
    nbytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON form (unset fields left out)."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "inputs": list(self.inputs)}
        for key in ("device", "function", "index"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.nbytes:
            out["nbytes"] = self.nbytes
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        """Parse one step of a manifest."""
        return cls(
            data["kind"], data["name"], tuple(data["inputs"]), data.get("device"),
            data.get("function"), data.get("index"), int(data.get("nbytes", 0)),
        )  # fmt: skip


@dataclass(frozen=True)
class Deployment:
    """Units, copies and home values of a compiled model; ``libraries[k]`` runs on device ``k``.

    ``libraries`` maps a device index to a loaded ``tvm.runtime.Module``, an executable (before
    saving), the library's file (a device on a remote worker: uploaded, never loaded here), or is
    empty in a manifest read without its libraries.
    """

    model: str
    devices: tuple[DeviceSpec, ...]
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    steps: tuple[Step, ...]
    plan: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    recipe: dict[str, Any] = field(default_factory=dict)
    """How it was made: ``{"argv": [...], "cwd": ...}`` of ``tvm-hetero compile`` (for
    ``run --replan``); empty when built through the Python API."""
    libraries: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def units(self) -> list[Step]:
        """The unit steps, in order."""
        return [s for s in self.steps if s.kind == "unit"]

    @property
    def copies(self) -> list[Step]:
        """The copies between devices that move data (not CPU worker to CPU worker)."""
        return [s for s in self.steps if s.kind == "copy" and self.moves(s)]

    def moves(self, step: Step) -> bool:
        """Whether a copy step moves bytes (CPU workers of one process share memory)."""
        a, b = self.devices[step.device], self.producer(step.inputs[0])
        return not (a.kind.value == b.kind.value == "cpu" and a.colocated(b))

    def producer(self, value: str) -> DeviceSpec:
        """The device of the step (or home input) that defines ``value``."""
        for s in self.steps:
            if s.name == value:
                return self.producer(s.inputs[0]) if s.kind == "item" else self.devices[s.device]
        return self.devices[0]

    def with_hosts(self, hosts: dict[str, str]) -> Deployment:
        """The same deployment with its remote devices' workers at new ``HOST:PORT`` addresses,
        by device name (a cluster brought up again elsewhere).

        Raises
        ------
        SpecError
            For a name that is not one of the deployment's remote devices.
        """
        remote = [d.name for d in self.devices if d.host is not None]
        unknown = sorted(set(hosts) - set(remote))
        if unknown:
            raise SpecError(
                f"{self.model}: {unknown} are not remote devices of this compiled model "
                f"(its remote devices: {remote or 'none'})"
            )
        devices = tuple(
            dataclasses.replace(d, host=hosts.get(d.name, d.host)) for d in self.devices
        )
        return dataclasses.replace(self, devices=devices)

    def manifest(self) -> dict[str, Any]:
        """The JSON saved as ``manifest.json``."""
        import tvm

        return {
            "format": FORMAT,
            "version": VERSION,
            "model": self.model,
            "source": self.source,
            "tvm": tvm.__version__,
            "devices": [d.to_dict() for d in self.devices],
            "inputs": [
                {
                    "name": i.name,
                    "shape": list(i.shape),
                    "dtype": i.dtype,
                    "high": i.high,
                    "low": i.low,
                }
                for i in self.inputs
            ],
            "outputs": list(self.outputs),
            "steps": [s.to_dict() for s in self.steps],
            "plan": self.plan,
            "recipe": self.recipe,
            "device_code": {
                str(k): list(lib.archs)
                for k, lib in self.libraries.items()
                if hasattr(lib, "archs")
            },
        }

    @classmethod
    def from_manifest(cls, data: dict[str, Any], libraries: dict[int, Any] | None = None):
        """A deployment from its manifest (and loaded libraries); :class:`ArtifactError` naming
        the first field it cannot use (:func:`~tvm_hetero.runtime.manifest.check_manifest`)."""
        check_manifest(data)
        devices = tuple(
            DeviceSpec.from_dict(d, f"manifest.devices[{i}]") for i, d in enumerate(data["devices"])
        )
        inputs = tuple(
            InputSpec(i["name"], tuple(i["shape"]), i["dtype"], i.get("high"), i.get("low"))
            for i in data["inputs"]
        )
        steps = tuple(Step.from_dict(s) for s in data["steps"])
        return cls(
            data["model"], devices, inputs, tuple(data["outputs"]), steps, data.get("plan", {}),
            data.get("source", ""), data.get("recipe", {}), dict(libraries or {}),
        )  # fmt: skip

    def save(self, path: str | Path) -> Path:
        """Write the ``.tar`` (manifest and one library per device); ``path`` appears whole or
        not at all."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        try:
            with tempfile.TemporaryDirectory() as tmp, tarfile.open(partial, "w") as tar:
                (Path(tmp) / MANIFEST).write_text(json.dumps(self.manifest(), indent=1))
                tar.add(Path(tmp) / MANIFEST, MANIFEST)
                for k, lib in sorted(self.libraries.items()):
                    file = lib if isinstance(lib, Path) else Path(tmp) / f"lib{k}.so"
                    if not isinstance(lib, Path):
                        with without_native_lines(SAVE_NOISE):
                            lib.export_library(str(file))
                    tar.add(file, f"lib{k}.so")
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
        return path


def retargeted(
    path: str | Path, out: str | Path, devices: tuple[DeviceSpec, ...], plan: dict[str, Any]
) -> Path:  # fmt: skip
    """A copy at ``out`` of the saved deployment ``path`` for ``devices`` (each of the kind
    and target of the one it replaces: the same code) and ``plan``: its manifest rewritten,
    its libraries copied as they are, without loading them (the pinned TVM never frees a
    library it loaded). ``out`` appears whole or not at all."""
    data = read_manifest(path)
    if len(devices) != len(data["devices"]):
        raise ValueError(f"{len(devices)} devices for a deployment on {len(data['devices'])}")
    given = [d.to_dict() for d in devices]
    for old, new in zip(data["devices"], given, strict=True):
        if (old["kind"], old.get("target")) != (new["kind"], new.get("target")):
            raise ValueError(f"{new['name']} is not of {old['name']}'s kind and target: its "
                             "code would differ; compile for it")  # fmt: skip
    data = {**data, "devices": given, "plan": plan}
    body = json.dumps(data, indent=1).encode()
    out = Path(out)
    partial = out.with_name(out.name + ".partial")
    try:
        with tarfile.open(path) as source, tarfile.open(partial, "w") as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
            for member in source.getmembers():
                if member.name != MANIFEST:
                    tar.addfile(member, source.extractfile(member))
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return out


SAVE_NOISE = "Warning: Scope Saving"
"""What TVM 0.27 prints to the process's stderr, four times a library, when it saves an
executable that a VM has run: nothing the user can act on."""


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a saved deployment, without loading its libraries."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"compiled model {str(path)!r} does not exist")
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile(MANIFEST)
            if member is None:
                raise KeyError(MANIFEST)
            data = json.loads(member.read())
    except (tarfile.TarError, KeyError, json.JSONDecodeError, UnicodeDecodeError) as err:
        why = str(err).strip().splitlines()[0].rstrip(":") if str(err).strip() else "unreadable"
        raise ArtifactError(
            f"{str(path)!r} is not a tvm-hetero compiled model "
            f"(a .tar from `tvm-hetero compile`): {why}"
        ) from None
    if not isinstance(data, dict):
        raise ArtifactError(
            f"{str(path)!r} is not a tvm-hetero compiled model: its manifest is a "
            f"{type(data).__name__}, not an object"
        )
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ArtifactError(
            f"{str(path)!r} is a compiled model of another format "
            f"({data.get('format')!r} v{data.get('version')}); compile it again"
        )
    return data


def load(path: str | Path, workdir: str | Path) -> Deployment:
    """Load a saved deployment; libraries are extracted into ``workdir`` and loaded.

    Raises
    ------
    ArtifactError
        For a file that is not a compiled model.
    SpecError
        For a device this machine does not have (checked before any library is loaded).
    """
    import tvm

    from tvm_hetero.runtime.cuda import check_device_code
    from tvm_hetero.runtime.device import runtime_device

    data = read_manifest(path)
    deployment = Deployment.from_manifest(data)
    codes = data.get("device_code", {})
    for k, spec in enumerate(deployment.devices):
        if spec.host is None:
            device = runtime_device(spec)  # a missing GPU fails here, before loading its code
            if str(k) in codes:
                check_device_code(spec.name, device, codes[str(k)])
    libraries: dict[int, Any] = {}
    claiming_pool.install()  # before the libraries load: they take the launcher then
    with tarfile.open(path) as tar:
        for k in sorted({s.device for s in deployment.units}):
            name = f"lib{k}.so"
            try:
                tar.extract(name, workdir, filter="data")
            except KeyError:
                raise ArtifactError(f"{str(path)!r} has no library {name}") from None
            path = Path(workdir) / name
            remote = deployment.devices[k].host is not None  # uploaded to its worker, as a file
            libraries[k] = path if remote else tvm.runtime.load_module(str(path))
    return Deployment.from_manifest(data, libraries)


__all__ = ["ArtifactError", "Deployment", "InputSpec", "SpecError", "Step", "load", "retargeted"]
