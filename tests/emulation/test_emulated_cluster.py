"""A real emulated cluster: namespaces, shaped veths, cgroups and workers (root only)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tvm_hetero import api
from tvm_hetero.devices import ClusterSpec, cpu_device
from tvm_hetero.devices.spec import Link
from tvm_hetero.emulation.control import (
    CGROUP_ROOT,
    SESSION_BYTES,
    cfs_period_us,
    leftovers,
    missing_privilege,
    up,
)
from tvm_hetero.emulation.control import down as control_down
from tvm_hetero.emulation.layout import CGROUP_PARENT, cluster_tag, plan_layout
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.link_probe import probe_link
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.zoo import load_zoo_model

WHY = missing_privilege()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"emulated cluster: {WHY}")

CLI = [sys.executable, "-m", "tvm_hetero.cli.main"]


def _device(name: str, **extra) -> dict:
    return {"name": name, "kind": "cpu", "target": {"kind": "llvm"}, **extra}


def _spec(tmp, name: str, devices: list[dict], links: list[tuple], topology: str) -> str:
    path = tmp / name
    path.write_text(json.dumps({
        "topology": topology, "devices": devices,
        "links": [{"a": a, "b": b, "bandwidth_mbps": mbps} for a, b, mbps in links],
    }))  # fmt: skip
    return str(path)


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    """Three workers in a ring: a-b 10 Mbit/s, b-c 100, a-c 1000; ``a`` capped to half a core
    and 1 GiB. Brought down at the end, and nothing may be left."""
    tmp = tmp_path_factory.mktemp("ring")
    devices = [
        _device("edge-a", cores=[0], cpu_quota=0.5, memory_bytes=2**30),
        _device("edge-b", cores=[1]),
        _device("edge-c", cores=[1]),
    ]
    links = [("edge-a", "edge-b", 10), ("edge-b", "edge-c", 100), ("edge-a", "edge-c", 1000)]
    spec = _spec(tmp, "ring.json", devices, links, "ring")
    up = _cli("cluster", "up", spec, "-o", str(tmp / "up.json"))
    assert up.returncode == 0, up.stdout + up.stderr
    yield cluster_tag(spec), ClusterSpec.load(tmp / "up.json"), tmp / "up.json"
    down = _cli("cluster", "down", spec)
    assert down.returncode == 0, down.stdout + down.stderr
    assert leftovers(cluster_tag(spec)) == {}


def _link_bytes(tag: str, namespace: int, dev: str) -> int:
    out = subprocess.run(
        ["tc", "-s", "-n", f"{tag}-{namespace}", "qdisc", "show", "dev", dev],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(out.split("Sent ")[1].split()[0])


def test_up_makes_namespaces_cgroups_and_runtime_only_workers(ring):
    tag, cluster, _ = ring
    found = leftovers(tag)
    assert found["namespaces"] == [f"{tag}-{i}" for i in range(3)]
    assert [d.host for d in cluster.devices] == [
        f"10.{d.split('.')[1]}.0.{i + 1}:9190" for i, d in enumerate(cluster.device(n).host
        for n in ("edge-a", "edge-b", "edge-c"))
    ]  # fmt: skip
    cpu = CGROUP_ROOT / "cpu" / CGROUP_PARENT / f"{tag}-0"
    memory = CGROUP_ROOT / "memory" / CGROUP_PARENT / f"{tag}-0"
    assert (cpu / "cpu.cfs_period_us").read_text().strip() == "5000"  # half a core, finely cut
    assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "2500"
    assert [cfs_period_us(q) for q in (0.5, 0.2, 0.1, 0.03)] == [5000, 5000, 10000, 33334]
    # the device's 1 GiB for the model, over what the idle worker and a session take
    over = int((memory / "memory.limit_in_bytes").read_text()) - 2**30 - SESSION_BYTES
    assert 0 < over < 2**30
    pids = (cpu / "cgroup.procs").read_text().split()
    assert pids and pids == (memory / "cgroup.procs").read_text().split()
    proc = Path(f"/proc/{pids[0]}")
    cmdline, environ = (proc / "cmdline").read_text(), (proc / "environ").read_text()
    assert "tvm_hetero.runtime.rpc_worker" in cmdline and "TVM_USE_RUNTIME_LIB=1" in environ
    assert os.sched_getaffinity(int(pids[0])) == {0}


def test_the_probe_measures_a_shaped_10_mbit_link_within_15_percent(ring):
    _, cluster, _ = ring
    probe = probe_link(cluster, cluster.link("edge-a", "edge-b"), repeat=3)
    assert abs(probe.bandwidth_mbps / 10 - 1) < 0.15, probe.bandwidth_mbps
    fast = probe_link(cluster, cluster.link("edge-b", "edge-c"), repeat=3)
    assert fast.bandwidth_mbps > 5 * probe.bandwidth_mbps
    record = probe.records[-1]
    assert record.fingerprint["host"] == cluster.device("edge-a").host
    assert record.workload["src"] == "edge-b" and record.median_s > 0


def test_a_partitioned_model_matches_and_its_tensors_take_the_shaped_links(ring):
    tag, cluster, _ = ring
    edges = [cluster.device(n) for n in ("edge-a", "edge-b", "edge-c")]
    model = load_zoo_model("mlp:tiny")
    placement = api.placement_from_rules(model, edges, {"matmul": "edge-b", "add": "edge-c"})
    deployment = api.compile(model, edges, placement).deployment
    assert {u.device for u in deployment.units} == {0, 1, 2}
    inputs = [spec.random(np.random.default_rng(0)) for spec in deployment.inputs]
    before = {dev: _link_bytes(tag, ns, dev) for ns, dev in ((1, "l0"), (2, "l1"), (0, "l2"))}
    with Executor(deployment) as ex:
        got = ex.run(inputs)
    with Executor(api.compile(model, [cpu_device(0)]).deployment) as ex:
        want = ex.run(inputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    after = {dev: _link_bytes(tag, ns, dev) for ns, dev in ((1, "l0"), (2, "l1"), (0, "l2"))}
    assert any(after[d] > before[d] for d in after), (before, after)


def test_profile_times_each_device_on_its_own_worker(ring, tmp_path):
    _, cluster, path = ring
    db = tmp_path / "p.jsonl"
    done = _cli(
        "profile", "mlp:tiny", "--cluster", str(path), "--device", "edge-a", "--device", "edge-c",
        "--db", str(db), "--repeat", "2", "--min-repeat-ms", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    hosts = {r.fingerprint["host"] for r in ProfileDB(db)}
    assert hosts == {cluster.device("edge-a").host, cluster.device("edge-c").host}
    assert "cluster probe" in done.stdout


def test_a_star_through_a_switch_shapes_each_leaf_to_its_link(tmp_path):
    devices = [_device("hub", cores=[0]), _device("leaf-1", cores=[1]), _device("leaf-2")]
    links = [("hub", "leaf-1", 10), ("hub", "leaf-2", 50)]
    spec = _spec(tmp_path, "star.json", devices, links, "star")
    tag = cluster_tag(spec)
    try:
        loaded = ClusterSpec.load(spec)
        cluster = up(loaded, plan_layout(loaded, tag))
        assert f"{tag}-sw" in leftovers(tag)["links"]
        fast = probe_link(cluster, cluster.link("hub", "leaf-2"), repeat=3)
        across = probe_link(cluster, Link("leaf-2", "leaf-1", 10.0), repeat=3)  # both links
        assert abs(fast.bandwidth_mbps / 50 - 1) < 0.15, fast.bandwidth_mbps
        assert abs(across.bandwidth_mbps / 10 - 1) < 0.15, across.bandwidth_mbps
    finally:
        _cli("cluster", "down", spec)
    assert leftovers(tag) == {}


def test_down_after_a_killed_up_leaves_nothing(tmp_path):
    spec = _spec(
        tmp_path, "pair.json", [_device("x", cpu_quota=0.3), _device("y")], [("x", "y", 50)],
        "mesh",
    )  # fmt: skip
    tag = cluster_tag(spec)
    up = subprocess.Popen([*CLI, "cluster", "up", spec], start_new_session=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not leftovers(tag).keys() >= {"cgroups", "processes"} and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(up.pid, signal.SIGKILL)
        up.wait()
        assert leftovers(tag).keys() >= {"namespaces", "links", "cgroups", "processes"}
        for _ in range(2):  # idempotent
            down = _cli("cluster", "down", spec)
            assert down.returncode == 0, down.stdout + down.stderr
            assert leftovers(tag) == {}
    finally:  # a failed check leaves nothing behind either
        with contextlib.suppress(ProcessLookupError):
            os.killpg(up.pid, signal.SIGKILL)
        control_down(tag)
