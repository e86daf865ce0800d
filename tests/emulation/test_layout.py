"""The emulated cluster's layout: names, addresses, shaped links and routes (no root needed)."""

import itertools
import random

import pytest

from tvm_hetero.devices import ClusterSpec, DeviceSpec, SpecError
from tvm_hetero.devices.spec import Link
from tvm_hetero.emulation.layout import cluster_tag, plan_layout, up_commands


def _cpus(n: int) -> list[DeviceSpec]:
    return [DeviceSpec(f"edge-{i}", "cpu", {"kind": "llvm"}) for i in range(n)]


def _hops_by_routes(layout, a: str, b: str) -> int:
    """Follow the routes from ``a``'s namespace to ``b``'s identity address; count the hops."""
    by_ip = {p.ip: p.namespace for p in layout.ports}
    for v in layout.veths:
        by_ip[v.ip_a], by_ip[v.ip_b] = v.ns_a, v.ns_b
    routes = {(ns, dest): via for ns, dest, via, _ in layout.routes}
    ns, goal, hops = layout.node(a).namespace, layout.node(b), 0
    while ns != goal.namespace:
        ns, hops = by_ip[routes[ns, goal.identity]], hops + 1
        assert hops <= len(layout.nodes), "routing loop"
    return hops


def _distances(names: list[str], links) -> dict:
    """Floyd-Warshall hop counts: the brute-force reference of the routes."""
    inf = float("inf")
    d = {(a, b): 0 if a == b else inf for a in names for b in names}
    for ln in links:
        d[ln.a, ln.b] = d[ln.b, ln.a] = 1
    for k, i, j in itertools.product(names, repeat=3):
        d[i, j] = min(d[i, j], d[i, k] + d[k, j])
    return d


@pytest.mark.parametrize("topology", ["ring", "mesh"])
@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_routes_follow_shortest_paths_of_links(topology, n):
    spec = ClusterSpec.uniform(_cpus(n), topology, 100.0)
    layout = plan_layout(spec, "th0a1b")
    names = [d.name for d in spec.devices]
    dist = _distances(names, spec.links)
    for a, b in itertools.permutations(names, 2):
        assert _hops_by_routes(layout, a, b) == dist[a, b], (a, b)
    for ns, _, _, src in layout.routes:  # replies come back the same way
        assert src == next(x.identity for x in layout.nodes if x.namespace == ns)


@pytest.mark.parametrize("topology", ["star", "parameter-server"])
def test_a_star_goes_through_a_switch_with_each_leaf_port_shaped_to_its_link(topology):
    devices = _cpus(4)
    links = tuple(Link("edge-2", d.name, 10.0 * (i + 1)) for i, d in enumerate(devices) if i != 2)
    layout = plan_layout(ClusterSpec(tuple(devices), links, topology, "edge-2"), "th0a1b")
    assert not layout.veths and len(layout.ports) == 4
    for a, b in itertools.permutations([d.name for d in devices], 2):
        assert _hops_by_routes(layout, a, b) == 1  # one hop, over the switch
    shaped = {p.namespace: p.link.bandwidth_mbps for p in layout.ports if p.link is not None}
    assert shaped == {"th0a1b-0": 10.0, "th0a1b-1": 20.0, "th0a1b-3": 40.0}  # the hub: none
    cmds = up_commands(layout)
    rates = sorted(c[c.index("rate") + 1] for c in cmds if c[0] == "tc")
    assert rates == sorted(["10000000bit", "20000000bit", "40000000bit"] * 2)  # both ways
    assert ["ip", "link", "set", "th0a1b-s2", "master", "th0a1b-sw", "up"] in cmds


def test_random_link_sets_route_along_shortest_paths():
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(2, 7)
        devices = _cpus(n)
        names = [d.name for d in devices]
        pairs = [(names[i - 1], names[i]) for i in range(1, n)]  # connected
        pairs += [p for p in itertools.combinations(names, 2) if rng.random() < 0.3]
        links = tuple(Link(a, b, 10.0) for a, b in dict.fromkeys(pairs))
        layout = plan_layout(ClusterSpec(tuple(devices), links), "th0001")
        dist = _distances(names, links)
        for a, b in itertools.permutations(names, 2):
            assert _hops_by_routes(layout, a, b) == dist[a, b]


def test_names_fit_the_kernel_and_links_are_shaped_both_ways():
    spec = ClusterSpec.uniform(_cpus(12), "mesh", 10.0)
    layout = plan_layout(spec, cluster_tag("/tmp/a/edge.toml"))
    cmds = up_commands(layout)
    made = [c[c.index("add") + 1] for c in cmds if c[:3] == ["ip", "link", "add"]]
    made += [c[c.index("name") + 1] for c in cmds if "veth" in c]
    assert made and all(len(name) <= 15 for name in made)
    shaped = [c for c in cmds if c[0] == "tc"]
    assert len(shaped) == 2 * len(spec.links) == 2 * 66
    assert all(c[c.index("rate") + 1] == "10000000bit" for c in shaped)
    ips = [n.identity for n in layout.nodes] + [v.ip_a for v in layout.veths]
    assert len(set(ips)) == len(ips)


def test_tags_are_stable_per_spec_file():
    assert cluster_tag("/tmp/a/edge.toml") == cluster_tag("/tmp/a/../a/edge.toml")
    assert cluster_tag("/tmp/a/edge.toml") != cluster_tag("/tmp/b/edge.toml")
    assert len(cluster_tag("x")) == 6


def test_what_cannot_be_emulated_is_named():
    gpu = DeviceSpec("gpu0", "cuda", {"kind": "cuda"})
    with pytest.raises(SpecError, match=r"'gpu0'\.kind: an emulated cluster has CPU devices only"):
        plan_layout(ClusterSpec((gpu,)), "th0000")
    remote = DeviceSpec("a", "cpu", {"kind": "llvm"}, host="10.0.0.1:9190")
    with pytest.raises(SpecError, match="assigns the addresses"):
        plan_layout(ClusterSpec((remote,)), "th0000")
    with pytest.raises(SpecError, match="no path of links from edge-0 to edge-1"):
        plan_layout(ClusterSpec(tuple(_cpus(2)), topology="ring"), "th0000")
