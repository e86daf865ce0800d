"""Device and cluster specifications: what runs where, and how devices are linked.

Specs are frozen dataclasses that load from and save to JSON or TOML; every validation error
names the bad field (``devices[1].kind``) and what is allowed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any


class SpecError(ValueError):
    """A device or cluster spec with a bad field."""


class DeviceKind(StrEnum):
    """What executes a device's work: this CPU, a CUDA GPU, or a simulation fed by profiles."""

    CPU = "cpu"
    CUDA = "cuda"
    SIMULATED = "simulated"


class Topology(StrEnum):
    """How the devices of a cluster are wired."""

    STAR = "star"
    RING = "ring"
    PARAMETER_SERVER = "parameter-server"
    MESH = "mesh"


_TARGET_KIND = {DeviceKind.CPU: "llvm", DeviceKind.CUDA: "cuda"}


def _enum(cls: type[Enum], value: Any, where: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in cls)  # type: ignore[attr-defined]
        raise SpecError(f"{where}: {value!r} is not one of {allowed}") from None


def split_address(text: object) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` string, or ``None`` when ``text`` is not one."""
    host, _, port = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def arch_number(arch: str) -> int:
    """``"sm_90a"`` -> 90: a CUDA arch's compute capability, to order archs by."""
    digits = arch.removeprefix("sm_").rstrip("a")
    if not arch.startswith("sm_") or not digits.isdigit():
        raise SpecError(f"{arch!r} is not a CUDA arch; write sm_NN, e.g. sm_90")
    return int(digits)


SAFE_NAME = re.compile(r"[A-Za-z0-9_@:][A-Za-z0-9_.@:-]{0,63}")
"""What a device name may be: it names log files, folders and cgroups, so no ``/``, no
whitespace, no shell characters, and no leading ``.`` (``..``) or ``-`` (an option)."""


def _check(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise SpecError(f"{where}: {message}")


@dataclass(frozen=True)
class DeviceSpec:
    """One device.

    Attributes
    ----------
    name : str
        Unique name (``cpu``, ``cpu:1``, ``gpu0``, ``edge-a``).
    kind : DeviceKind
        ``cpu``, ``cuda`` or ``simulated``.
    target : dict
        TVM target in dict form (``{"kind": "llvm", "mcpu": "znver3"}``); empty for simulated.
    index : int
        Device index handed to TVM (``tvm.cpu(index)``, ``tvm.cuda(index)``).
    memory_bytes : int or None
        Memory the model may take on the device (weights and buffers: what planners with
        memory limits place), besides what the runtime itself takes.
    threads : int or None
        Worker threads the device uses (CPU); ``None`` leaves TVM's default.
    host : str or None
        Address of the TVM RPC server that owns the device; ``None`` for this process.
    profile : str or None
        For simulated devices: the profile source its costs come from.
    cores : tuple of int or None
        CPU cores the device's worker is pinned to (``cpu@2-5``), as many threads as cores;
        ``None``: not pinned.
    key : str or None
        With ``host`` the address of a TVM RPC tracker: the device's worker is requested from
        the tracker by this key (a worker started with ``--tracker HOST:PORT --key KEY``; each
        such device gets a worker of its own). ``None``: ``host`` is the worker itself.
    cpu_quota : float or None
        CPU time the device's worker may use, in cores (``0.5``: half of one core), enforced by
        a cgroup CPU quota in an emulated cluster (``tvm-hetero cluster up``); ``None``: no cap.
    """

    name: str
    kind: DeviceKind
    target: dict[str, Any] = field(default_factory=dict)
    index: int = 0
    memory_bytes: int | None = None
    threads: int | None = None
    host: str | None = None
    profile: str | None = None
    cores: tuple[int, ...] | None = None
    cpu_quota: float | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        where = f"device {self.name!r}"
        _check(
            isinstance(self.name, str) and SAFE_NAME.fullmatch(self.name) is not None,
            "device.name",
            f"{self.name!r} is not a device name: use 1-64 letters, digits and - _ . @ : "
            "(not starting with '.' or '-'; a name becomes part of file names)",
        )
        object.__setattr__(self, "kind", _enum(DeviceKind, self.kind, f"{where}.kind"))
        _check(
            isinstance(self.index, int) and self.index >= 0,
            f"{where}.index",
            f"must be an integer >= 0, got {self.index!r}",
        )
        for name in ("memory_bytes", "threads"):
            value = getattr(self, name)
            _check(
                value is None or (isinstance(value, int) and value > 0),
                f"{where}.{name}",
                f"must be a positive integer, got {value!r}",
            )
        _check(
            isinstance(self.target, dict), f"{where}.target", "must be a TVM target in dict form"
        )
        _check(
            self.host is None or split_address(self.host) is not None,
            f"{where}.host",
            f"must be HOST:PORT of a `tvm-hetero worker`, got {self.host!r}",
        )
        if self.cores is not None:
            cores = self.cores
            _check(
                isinstance(cores, list | tuple)
                and len(cores) > 0
                and all(isinstance(c, int) and c >= 0 for c in cores)
                and len(set(cores)) == len(cores),
                f"{where}.cores",
                f"must be a non-empty list of distinct core numbers >= 0, got {cores!r}",
            )
            object.__setattr__(self, "cores", tuple(cores))
            _check(self.kind is DeviceKind.CPU, f"{where}.cores", "only a CPU device has cores")
            _check(
                self.threads in (None, len(cores)),
                f"{where}.threads",
                f"must equal the number of cores ({len(cores)}), got {self.threads!r}",
            )
            object.__setattr__(self, "threads", len(cores))
        if self.key is not None:
            _check(
                isinstance(self.key, str) and self.key != "" and self.host is not None,
                f"{where}.key",
                f"names workers at a tracker: a non-empty string, with host = the tracker's "
                f"HOST:PORT; got key {self.key!r}, host {self.host!r}",
            )
        if self.cpu_quota is not None:
            _check(
                isinstance(self.cpu_quota, int | float) and 0.01 <= self.cpu_quota <= 1024,
                f"{where}.cpu_quota",
                f"must be a number of cores in [0.01, 1024], got {self.cpu_quota!r}",
            )
            _check(self.kind is DeviceKind.CPU, f"{where}.cpu_quota", "only a CPU device has one")
        if self.kind is DeviceKind.SIMULATED:
            _check(not self.target, f"{where}.target", "a simulated device has no TVM target")
            return
        expected = _TARGET_KIND[self.kind]
        _check(
            self.target.get("kind") == expected,
            f"{where}.target.kind",
            f"must be {expected!r} for a {self.kind.value} device, got {self.target.get('kind')!r}",
        )

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the device's worker; ``ValueError`` for a device of this process."""
        found = split_address(self.host)
        if found is None:
            raise ValueError(f"device {self.name!r} has no worker address (host)")
        return found

    @property
    def worker_id(self) -> str | None:
        """Which process runs the device: ``None`` for this one, else its worker (a tracker's
        device: a worker of its own)."""
        if self.key is not None:
            return f"{self.host}/{self.key}/{self.name}"
        return self.host

    def colocated(self, other: DeviceSpec) -> bool:
        """Whether both devices run in one process (this one, or one worker)."""
        return self.worker_id == other.worker_id

    @property
    def compute_class(self) -> str:
        """Devices of one class compute alike (same kind, target, threads and CPU quota): what a
        workload costs on one of them is what it costs on each (PipeEdge's device types), so
        planners time it once a class, and never read two samples of the same rate as two
        rates."""
        return json.dumps([self.kind.value, self.target, self.threads, self.cpu_quota],
                          sort_keys=True)  # fmt: skip

    @property
    def simulated(self) -> bool:
        """``True`` for a device that only exists as a profile."""
        return self.kind is DeviceKind.SIMULATED

    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-friendly form (unset optional fields left out)."""
        out: dict[str, Any] = {"name": self.name, "kind": self.kind.value, "index": self.index}
        if self.target:
            out["target"] = dict(self.target)
        for key in ("memory_bytes", "threads", "host", "profile", "cpu_quota", "key"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.cores is not None:
            out["cores"] = list(self.cores)
        return out

    def runs_beside(self, other: DeviceSpec) -> bool:
        """Whether work on this device and on ``other`` really runs at the same time: one of them
        is a GPU, they are on different hosts, or both are CPU workers on disjoint core sets."""
        if not self.colocated(other) or DeviceKind.CUDA in (self.kind, other.kind):
            return True
        if self.cores is None or other.cores is None:
            return False
        return not set(self.cores) & set(other.cores)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "device") -> DeviceSpec:
        """Parse and validate; errors name ``where`` and the field."""
        _check(isinstance(data, dict), where, f"must be a table/object, got {type(data).__name__}")
        known = {
            "name", "kind", "target", "index", "memory_bytes", "threads", "host", "profile",
            "cores", "cpu_quota", "key",
        }  # fmt: skip
        unknown = sorted(set(data) - known)
        _check(
            not unknown,
            f"{where}.{unknown[0] if unknown else ''}",
            f"unknown field; fields are {sorted(known)}",
        )
        for key in ("name", "kind"):
            _check(key in data, f"{where}.{key}", "is required")
        try:
            return cls(**data)
        except SpecError as err:
            raise SpecError(f"{where}: {err}") from None


@dataclass(frozen=True)
class Link:
    """A network link between two devices (both directions).

    Attributes
    ----------
    a, b : str
        Device names.
    bandwidth_mbps : float
        Bandwidth in megabits per second.
    latency_ms : float
        One-way latency in milliseconds.
    """

    a: str
    b: str
    bandwidth_mbps: float
    latency_ms: float = 0.0

    def transfer_seconds(self, nbytes: int) -> float:
        """Time to send ``nbytes`` over this link: ``latency + bytes / bandwidth``."""
        return self.latency_ms / 1e3 + nbytes * 8 / (self.bandwidth_mbps * 1e6)

    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-friendly form."""
        return {
            "a": self.a,
            "b": self.b,
            "bandwidth_mbps": self.bandwidth_mbps,
            "latency_ms": self.latency_ms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> Link:
        """Parse and validate one link."""
        _check(isinstance(data, dict), where, "must be a table/object")
        for key in ("a", "b", "bandwidth_mbps"):
            _check(key in data, f"{where}.{key}", "is required")
        bw, lat = data["bandwidth_mbps"], data.get("latency_ms", 0.0)
        _check(
            isinstance(bw, int | float) and bw > 0,
            f"{where}.bandwidth_mbps",
            f"must be > 0, got {bw!r}",
        )
        _check(
            isinstance(lat, int | float) and lat >= 0,
            f"{where}.latency_ms",
            f"must be >= 0, got {lat!r}",
        )
        return cls(str(data["a"]), str(data["b"]), float(bw), float(lat))
