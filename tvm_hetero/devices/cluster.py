"""Cluster spec: devices, the links between them and the topology, loadable from JSON or TOML."""

from __future__ import annotations

import json
import os
import tomllib
from collections import deque
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from tvm_hetero.devices.spec import DeviceSpec, Link, SpecError, Topology, _check, _enum


def topology_pairs(topology: Topology, names: list[str], hub: str | None) -> set[frozenset[str]]:
    """The device pairs a topology wires together.

    ``star`` and ``parameter-server`` join every device to the hub (the first device unless
    ``hub`` names another); ``ring`` joins neighbours in list order; ``mesh`` joins every pair.
    """
    if topology in (Topology.STAR, Topology.PARAMETER_SERVER):
        center = hub or names[0]
        return {frozenset((center, n)) for n in names if n != center}
    if topology is Topology.RING:
        if len(names) == 2:
            return {frozenset(names)}
        return {frozenset((names[i], names[(i + 1) % len(names)])) for i in range(len(names))}
    return {frozenset(p) for p in combinations(names, 2)}


def shortest_next_hops(names: list[str], links: tuple[Link, ...]) -> dict[str, dict[str, str]]:
    """``hop[a][b]``: the neighbour of ``a`` on a shortest path of links to ``b`` (BFS, ties to
    the first-listed link)."""
    adjacent: dict[str, list[str]] = {n: [] for n in names}
    for ln in links:
        adjacent[ln.a].append(ln.b)
        adjacent[ln.b].append(ln.a)
    hops: dict[str, dict[str, str]] = {}
    for start in names:
        first: dict[str, str] = {}
        queue = deque((n, n) for n in adjacent[start])
        seen = {start}
        while queue:
            node, via = queue.popleft()
            if node in seen:
                continue
            seen.add(node)
            first[node] = via
            queue.extend((m, via) for m in adjacent[node] if m not in seen)
        hops[start] = first
    return hops


@dataclass(frozen=True)
class ClusterSpec:
    """Devices, links and topology.

    Attributes
    ----------
    devices : tuple[DeviceSpec, ...]
        The devices; names are unique.
    links : tuple[Link, ...]
        One link per wired pair of the topology.
    topology : Topology
        ``star``, ``ring``, ``parameter-server`` or ``mesh``.
    hub : str or None
        Centre of a star or the parameter server (default: the first device).
    """

    devices: tuple[DeviceSpec, ...]
    links: tuple[Link, ...] = ()
    topology: Topology = Topology.MESH
    hub: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topology", _enum(Topology, self.topology, "cluster.topology"))
        _check(len(self.devices) > 0, "cluster.devices", "must list at least one device")
        names = [d.name for d in self.devices]
        dupes = sorted({n for n in names if names.count(n) > 1})
        _check(not dupes, "cluster.devices", f"duplicate device name(s) {dupes}")
        _check(
            self.hub is None or self.hub in names,
            "cluster.hub",
            f"{self.hub!r} is not a device; devices are {names}",
        )
        allowed = topology_pairs(self.topology, names, self.hub)
        seen: set[frozenset[str]] = set()
        for i, link in enumerate(self.links):
            where = f"cluster.links[{i}]"
            for end in (link.a, link.b):
                _check(
                    end in names,
                    where,
                    f"device {end!r} is not in the cluster; devices are {names}",
                )
            pair = frozenset((link.a, link.b))
            _check(len(pair) == 2, where, "a link joins two different devices")
            _check(pair not in seen, where, f"{link.a}-{link.b} is listed twice")
            _check(
                pair in allowed,
                where,
                f"{link.a}-{link.b} is not a link of a {self.topology.value} topology",
            )
            seen.add(pair)

    def device(self, name: str) -> DeviceSpec:
        """The device called ``name``."""
        for d in self.devices:
            if d.name == name:
                return d
        raise SpecError(
            f"cluster has no device {name!r}; devices are {[d.name for d in self.devices]}"
        )

    def link(self, a: str, b: str) -> Link | None:
        """The direct link between ``a`` and ``b``, if the topology has one."""
        pair = frozenset((a, b))
        return next((ln for ln in self.links if frozenset((ln.a, ln.b)) == pair), None)

    def route(self, a: str, b: str) -> list[Link] | None:
        """The links from ``a`` to ``b`` along the path an emulated cluster routes them (fewest
        hops, ties to the first-listed link); ``None`` when no links join them."""
        names = [d.name for d in self.devices]
        hops = shortest_next_hops(names, self.links)
        path, here = [], a
        while here != b:
            if b not in hops.get(here, {}):
                return None
            there = hops[here][b]
            path.append(self.link(here, there))
            here = there
        return path

    def path_rate(self, a: str, b: str) -> tuple[float, float] | None:
        """``(bytes per second, seconds of latency)`` from ``a`` to ``b`` along :meth:`route`:
        the slowest link's bandwidth, the latencies summed (what EdgePipe and DUET price a
        crossing between machines at); ``None`` when no links join them."""
        path = self.route(a, b)
        if not path:
            return None
        bandwidth_mbps = min(ln.bandwidth_mbps for ln in path)
        return bandwidth_mbps * 1e6 / 8, sum(ln.latency_ms for ln in path) / 1e3

    @classmethod
    def uniform(
        cls, devices: list[DeviceSpec], topology: Topology | str, bandwidth_mbps: float,
        latency_ms: float = 0.0, hub: str | None = None,
    ) -> ClusterSpec:  # fmt: skip
        """A cluster whose every topology link has the same bandwidth and latency."""
        topo = _enum(Topology, topology, "cluster.topology")
        pairs = topology_pairs(topo, [d.name for d in devices], hub)
        order = {d.name: i for i, d in enumerate(devices)}
        links = tuple(
            Link(*sorted(p, key=order.__getitem__), bandwidth_mbps, latency_ms)
            for p in sorted(pairs, key=lambda p: sorted(order[n] for n in p))
        )
        return cls(tuple(devices), links, topo, hub)

    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-friendly form."""
        out: dict[str, Any] = {"topology": self.topology.value}
        if self.hub is not None:
            out["hub"] = self.hub
        out["devices"] = [d.to_dict() for d in self.devices]
        out["links"] = [ln.to_dict() for ln in self.links]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterSpec:
        """Parse and validate; errors name the bad field."""
        _check(isinstance(data, dict), "cluster", "must be a table/object")
        unknown = sorted(set(data) - {"devices", "links", "topology", "hub"})
        _check(
            not unknown,
            f"cluster.{unknown[0] if unknown else ''}",
            "unknown field; fields are devices, links, topology, hub",
        )
        _check(
            isinstance(data.get("devices"), list),
            "cluster.devices",
            "is required and must be a list",
        )
        devices = tuple(
            DeviceSpec.from_dict(d, f"cluster.devices[{i}]") for i, d in enumerate(data["devices"])
        )
        links = tuple(
            Link.from_dict(ln, f"cluster.links[{i}]") for i, ln in enumerate(data.get("links", []))
        )
        return cls(devices, links, data.get("topology", Topology.MESH.value), data.get("hub"))

    @classmethod
    def load(cls, path: str | Path) -> ClusterSpec:
        """Read a ``.json`` or ``.toml`` cluster file."""
        path = Path(path)
        if not path.is_file():
            problem = "is a folder" if path.is_dir() else "does not exist"
            raise SpecError(f"cluster file {str(path)!r} {problem}")
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SpecError(
                f"cluster file {str(path)!r} is not valid "
                f"{path.suffix[1:].upper() or 'JSON'}: {err}"
            ) from None
        try:
            return cls.from_dict(data)
        except SpecError as err:
            raise SpecError(f"{path}: {err}") from None

    def save(self, path: str | Path) -> None:
        """Write as ``.toml`` or ``.json`` (by suffix), whole or not at all."""
        path = Path(path)
        if path.suffix == ".toml":
            import tomli_w

            text = tomli_w.dumps(self.to_dict())
        else:
            text = json.dumps(self.to_dict(), indent=2) + "\n"
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(text)
        os.replace(partial, path)
