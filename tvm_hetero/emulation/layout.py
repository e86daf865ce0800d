"""What an emulated cluster is made of: a pure function from a cluster spec to names, addresses,
shaped links and the commands that make them (no side effects; :mod:`.control` runs them).

Each device gets a network namespace ``TAG-I`` with one *identity* address ``10.N.0.(I+1)`` on its
loopback; its worker listens there. In a ring or mesh each link of the spec is a veth pair
between the two namespaces (a ``/30`` of ``10.N.1-63.x``), shaped in both directions with ``tbf``
to the link's bandwidth, and every namespace routes each other identity address along a shortest
path of links (a ring's far side through a neighbour, which forwards), with the identity address
as source. A star (or parameter server) goes through a switch: a bridge ``TAG-sw`` with every
device's port on ``10.N.128.0/24``, each leaf's port shaped both ways to its link to the hub, so
leaf to leaf crosses both leaves' links. The client reaches the workers over a
control bridge ``TAG-br`` in the root namespace (``10.N.255.0/24``, not shaped): it sends inputs
and receives outputs only, worker-to-worker tensors take the shaped links.

``tc`` here has ``tbf`` and ``htb`` but no ``netem``: a link's ``latency_ms`` cannot be emulated
and is reported as such; its bandwidth is.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tvm_hetero.devices.cluster import ClusterSpec, shortest_next_hops
from tvm_hetero.devices.spec import DeviceKind, Link, SpecError, Topology

WORKER_PORT = 9190
CGROUP_PARENT = "tvm-hetero"
MAX_DEVICES = 250


def cluster_tag(spec_path: str | Path) -> str:
    """``th`` and four hex digits of the spec file's absolute path: the prefix of everything
    ``cluster up`` makes for it, so ``cluster down`` finds it again, even after a crash."""
    digest = hashlib.sha1(str(Path(spec_path).resolve()).encode()).hexdigest()
    return "th" + digest[:4]


@dataclass(frozen=True)
class Veth:
    """One shaped link: ``dev_a`` in namespace ``ns_a`` (address ``ip_a``) to ``dev_b``."""

    ns_a: str
    dev_a: str
    ip_a: str
    ns_b: str
    dev_b: str
    ip_b: str
    link: Link


@dataclass(frozen=True)
class Port:
    """A device's port on the switch of a star: ``sw`` in ``namespace`` (address ``ip``) to
    ``switch_side`` on the bridge, shaped to ``link`` (the leaf's link to the hub; none for the
    hub)."""

    namespace: str
    switch_side: str
    ip: str
    link: Link | None


@dataclass(frozen=True)
class Node:
    """One device's namespace, addresses and limits."""

    device: str
    namespace: str
    identity: str
    control_ip: str
    bridge_port: str
    cores: tuple[int, ...] | None
    cpu_quota: float | None
    memory_bytes: int | None

    @property
    def address(self) -> str:
        """``HOST:PORT`` of its worker."""
        return f"{self.identity}:{WORKER_PORT}"


@dataclass(frozen=True)
class Layout:
    """Everything ``cluster up`` makes for one spec."""

    tag: str
    net: int
    nodes: tuple[Node, ...]
    veths: tuple[Veth, ...]
    routes: tuple[tuple[str, str, str, str], ...]  # (namespace, destination, via, source)
    ports: tuple[Port, ...] = ()

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    @property
    def shaped_links(self) -> int:
        """Links of the spec made: veth pairs, or a star's leaf ports."""
        return len(self.veths) + sum(p.link is not None for p in self.ports)

    @property
    def bridge(self) -> str:
        return f"{self.tag}-br"

    @property
    def bridge_ip(self) -> str:
        return f"10.{self.net}.255.254"

    def node(self, device: str) -> Node:
        return next(n for n in self.nodes if n.device == device)


def _check_emulable(spec: ClusterSpec) -> None:
    if len(spec.devices) > MAX_DEVICES:
        raise SpecError(f"cluster.devices: an emulated cluster has at most {MAX_DEVICES} devices")
    for d in spec.devices:
        if d.kind is not DeviceKind.CPU:
            raise SpecError(
                f"device {d.name!r}.kind: an emulated cluster has CPU devices only, "
                f"got {d.kind.value!r}"
            )
        if d.host is not None:
            raise SpecError(
                f"device {d.name!r}.host: `cluster up` assigns the addresses; remove {d.host!r}"
            )
    names = [d.name for d in spec.devices]
    unreachable = sorted(set(names[1:]) - set(shortest_next_hops(names, spec.links)[names[0]]))
    if unreachable:
        raise SpecError(
            f"cluster.links: no path of links from {names[0]} to {unreachable[0]}; an emulated "
            "cluster emulates the links the file lists (with their bandwidth)"
        )


def plan_layout(spec: ClusterSpec, tag: str) -> Layout:
    """Names, addresses, links and routes of the emulated ``spec``.

    Raises
    ------
    SpecError
        For a device that cannot be emulated (not a CPU, already has a host) or a topology pair
        without a link, naming it.
    """
    _check_emulable(spec)
    net = 64 + int(tag[2:], 16) % 128
    names = [d.name for d in spec.devices]
    index = {n: i for i, n in enumerate(names)}
    nodes = tuple(
        Node(
            d.name,
            f"{tag}-{i}",
            f"10.{net}.0.{i + 1}",
            f"10.{net}.255.{i + 1}",
            f"{tag}-c{i}",
            d.cores,
            d.cpu_quota,
            d.memory_bytes,
        )
        for i, d in enumerate(spec.devices)
    )
    if spec.topology in (Topology.STAR, Topology.PARAMETER_SERVER):
        return _star_layout(spec, tag, net, nodes)
    veths = []
    peer_ip: dict[tuple[str, str], str] = {}  # (from, to): the address of `to` on their link
    for k, ln in enumerate(spec.links):
        i, j = index[ln.a], index[ln.b]
        prefix = f"10.{net}.{1 + k // 64}"
        ip_a, ip_b = f"{prefix}.{4 * (k % 64) + 1}", f"{prefix}.{4 * (k % 64) + 2}"
        veths.append(Veth(nodes[i].namespace, f"l{j}", ip_a, nodes[j].namespace, f"l{i}", ip_b, ln))
        peer_ip[(ln.a, ln.b)], peer_ip[(ln.b, ln.a)] = ip_b, ip_a
    hops = shortest_next_hops(names, spec.links)
    routes = tuple(
        (
            nodes[index[a]].namespace,
            nodes[index[b]].identity,
            peer_ip[(a, via)],
            nodes[index[a]].identity,
        )
        for a in names
        for b, via in hops[a].items()
    )
    return Layout(tag, net, nodes, tuple(veths), routes)


def _star_layout(spec: ClusterSpec, tag: str, net: int, nodes: tuple[Node, ...]) -> Layout:
    """A star through a switch: every device on one bridge, each leaf's port shaped to its link
    to the hub (both ways), so leaf to leaf crosses both leaves' links, as through the hub."""
    hub = spec.hub or spec.devices[0].name
    ports = tuple(
        Port(
            n.namespace,
            f"{tag}-s{i}",
            f"10.{net}.128.{i + 1}",
            None if n.device == hub else spec.link(hub, n.device),
        )
        for i, n in enumerate(nodes)
    )
    routes = tuple(
        (a.namespace, b.identity, ports[j].ip, a.identity)
        for a in nodes
        for j, b in enumerate(nodes)
        if a is not b
    )
    return Layout(tag, net, nodes, (), routes, ports)


QUEUE_BYTES = 8 * 2**20
"""Bytes a shaped link queues before it drops: two tensor connections' whole send buffers
(``tensor_link.SOCKET_BUFFER_BYTES``). A NIC holds its own host's packets back rather than drop
them; with a queue of 100 ms of traffic (125 KB at 10 Mbit/s) a 300 KB activation sent at once
lost packets on every transfer, and a pipelined stage waited out the recovery."""


def _tbf(link: Link) -> list[str]:
    """``tbf`` arguments for the link's rate: a burst of ~4 ms of traffic (at least 16 KiB), so
    TCP sees the rate and not the bucket, and a queue of :data:`QUEUE_BYTES`."""
    rate_bps = link.bandwidth_mbps * 1e6
    burst = max(16 * 1024, int(rate_bps / 8 * 0.004))
    return ["tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "limit", str(QUEUE_BYTES)]


def _veth(name: str, peer: str, peer_ns: str, ns: str | None = None) -> list[str]:
    """A veth pair: ``name`` (in ``ns``, else the root namespace) and ``peer`` in ``peer_ns``."""
    where = ["-n", ns] if ns else []
    return ["ip", *where, "link", "add", name, "type", "veth", "peer", "name", peer, "netns",
            peer_ns]  # fmt: skip


def up_commands(layout: Layout) -> list[list[str]]:
    """The ``ip`` / ``tc`` commands that make ``layout`` (run as root, in order)."""
    cmds: list[list[str]] = [
        ["ip", "link", "add", layout.bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{layout.bridge_ip}/24", "dev", layout.bridge],
        ["ip", "link", "set", layout.bridge, "up"],
    ]
    for n in layout.nodes:
        ns = ["ip", "-n", n.namespace]
        cmds += [
            ["ip", "netns", "add", n.namespace],
            *(
                ["ip", "netns", "exec", n.namespace, "sysctl", "-qw", f"net.ipv4.{key}"]
                for key in ("ip_forward=1", "conf.all.rp_filter=0", "conf.default.rp_filter=0")
            ),
            [*ns, "link", "set", "lo", "up"],
            [*ns, "addr", "add", f"{n.identity}/32", "dev", "lo"],
            _veth(n.bridge_port, "ctl", n.namespace),
            ["ip", "link", "set", n.bridge_port, "master", layout.bridge, "up"],
            [*ns, "addr", "add", f"{n.control_ip}/24", "dev", "ctl"],
            [*ns, "link", "set", "ctl", "up"],
            ["ip", "route", "replace", f"{n.identity}/32", "via", n.control_ip],  # a lingering
            # route of a cluster just taken down with the same address failed an "add"
        ]
    for v in layout.veths:
        cmds += [
            _veth(v.dev_a, v.dev_b, v.ns_b, v.ns_a),
            ["ip", "-n", v.ns_a, "addr", "add", f"{v.ip_a}/30", "dev", v.dev_a],
            ["ip", "-n", v.ns_b, "addr", "add", f"{v.ip_b}/30", "dev", v.dev_b],
            ["ip", "-n", v.ns_a, "link", "set", v.dev_a, "up"],
            ["ip", "-n", v.ns_b, "link", "set", v.dev_b, "up"],
            ["tc", "-n", v.ns_a, "qdisc", "add", "dev", v.dev_a, "root", *_tbf(v.link)],
            ["tc", "-n", v.ns_b, "qdisc", "add", "dev", v.dev_b, "root", *_tbf(v.link)],
        ]
    if layout.ports:
        cmds += [
            ["ip", "link", "add", layout.switch, "type", "bridge"],
            ["ip", "link", "set", layout.switch, "up"],
        ]
    for p in layout.ports:
        cmds += [
            _veth(p.switch_side, "sw", p.namespace),
            ["ip", "link", "set", p.switch_side, "master", layout.switch, "up"],
            ["ip", "-n", p.namespace, "addr", "add", f"{p.ip}/24", "dev", "sw"],
            ["ip", "-n", p.namespace, "link", "set", "sw", "up"],
        ]
        if p.link is not None:
            cmds += [
                ["tc", "-n", p.namespace, "qdisc", "add", "dev", "sw", "root", *_tbf(p.link)],
                ["tc", "qdisc", "add", "dev", p.switch_side, "root", *_tbf(p.link)],
            ]
    for ns, dest, via, src in layout.routes:
        cmds.append(["ip", "-n", ns, "route", "add", f"{dest}/32", "via", via, "src", src])
    return cmds
