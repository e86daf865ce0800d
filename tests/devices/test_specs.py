import json

import pytest
import tvm

from tvm_hetero.build.vdevices import to_vdevice
from tvm_hetero.devices import (
    ClusterSpec,
    DeviceKind,
    DeviceSpec,
    Link,
    SpecError,
    Topology,
    cpu_device,
    cuda_device,
    discover,
    resolve_device,
    topology_pairs,
)
from tvm_hetero.runtime.device import vdevice_runtime_device as runtime_device

CPU = {"kind": "llvm"}


def _edge_devices(n):
    return [
        DeviceSpec(f"edge{i}", DeviceKind.CPU, CPU, 0, 2**30, 4, f"10.0.0.{i}:9190")
        for i in range(n)
    ]


@pytest.mark.parametrize("suffix", [".json", ".toml"])
@pytest.mark.parametrize("topology", list(Topology))
def test_cluster_round_trip(tmp_path, suffix, topology):
    devices = [*_edge_devices(3), DeviceSpec("pim", DeviceKind.SIMULATED, profile="lee2023:pim")]
    cluster = ClusterSpec.uniform(devices, topology, bandwidth_mbps=1000, latency_ms=0.5)
    path = tmp_path / f"cluster{suffix}"
    cluster.save(path)
    assert ClusterSpec.load(path) == cluster


def test_topology_pairs():
    names = ["a", "b", "c", "d"]
    assert topology_pairs(Topology.RING, names, None) == {
        frozenset(p) for p in (("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"))
    }
    assert topology_pairs(Topology.STAR, names, "c") == {frozenset(("c", n)) for n in "abd"}
    assert len(topology_pairs(Topology.MESH, names, None)) == 6
    assert topology_pairs(Topology.PARAMETER_SERVER, names, None) == {
        frozenset(("a", n)) for n in "bcd"
    }


def test_link_transfer_time():
    link = Link("a", "b", bandwidth_mbps=100, latency_ms=2)
    assert link.transfer_seconds(1_250_000) == pytest.approx(0.002 + 0.1)


BAD = [
    ({"devices": [{"name": "a", "kind": "tpu"}]}, r"cluster.devices\[0\]: device 'a'.kind: 'tpu' is not one of 'cpu', 'cuda', 'simulated'"),
    ({"devices": [{"name": "a"}]}, r"cluster.devices\[0\].kind: is required"),
    ({"devices": [{"name": "a", "kind": "cpu", "target": {"kind": "cuda"}}]}, r"target.kind: must be 'llvm' for a cpu device"),
    ({"devices": [{"name": "a", "kind": "cpu", "target": CPU, "threads": 0}]}, r"\.threads: must be a positive integer, got 0"),
    ({"devices": [{"name": "a", "kind": "cpu", "target": CPU, "colour": 1}]}, r"cluster.devices\[0\].colour: unknown field"),
    ({"devices": []}, r"cluster.devices: must list at least one device"),
    ({"devices": [{"name": "a", "kind": "cpu", "target": CPU, "host": "10.0.0.1"}]}, r"device 'a'.host: must be HOST:PORT of a `tvm-hetero worker`, got '10.0.0.1'"),
    ({"devices": [{"name": "a", "kind": "cpu", "target": CPU, "host": "box:99999"}]}, r"\.host: must be HOST:PORT"),
    ({"devices": [{"name": "a", "kind": "simulated", "target": CPU}]}, r"a simulated device has no TVM target"),
    ({"topology": "torus", "devices": [{"name": "a", "kind": "simulated"}]}, r"cluster.topology: 'torus' is not one of"),
    ({"devices": [{"name": "a", "kind": "simulated"}, {"name": "a", "kind": "simulated"}]}, r"duplicate device name\(s\) \['a'\]"),
    ({"devices": [{"name": "a", "kind": "simulated"}], "links": [{"a": "a", "b": "z", "bandwidth_mbps": 1}]}, r"cluster.links\[0\]: device 'z' is not in the cluster"),
    ({"devices": [{"name": "a", "kind": "simulated"}, {"name": "b", "kind": "simulated"}], "links": [{"a": "a", "b": "b", "bandwidth_mbps": -5}]}, r"cluster.links\[0\].bandwidth_mbps: must be > 0, got -5"),
    (
        {
            "topology": "star", "hub": "a",
            "devices": [{"name": n, "kind": "simulated"} for n in "abc"],
            "links": [{"a": "b", "b": "c", "bandwidth_mbps": 10}],
        },
        r"cluster.links\[0\]: b-c is not a link of a star topology",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), BAD)
def test_bad_cluster_fields_are_named(tmp_path, data, message):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=message):
        ClusterSpec.load(path)


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("devices = [ {name = ")
    with pytest.raises(SpecError, match="is not valid TOML"):
        ClusterSpec.load(bad)
    with pytest.raises(SpecError, match="does not exist"):
        ClusterSpec.load(tmp_path / "none.json")


def test_discovery_and_cli_device_names():
    devices = discover()
    assert devices[0].name == "cpu" and devices[0].kind is DeviceKind.CPU
    assert devices[0].target["mcpu"] and devices[0].target["mtriple"] == "x86_64-linux-gnu"
    assert devices[0].threads >= 1 and devices[0].memory_bytes > 0
    assert resolve_device("cpu:1").index == 1
    assert resolve_device("cuda", cuda_arch="sm_80").target["arch"] == "sm_80"
    cluster = ClusterSpec(tuple(_edge_devices(2)))
    assert resolve_device("edge1", cluster).host == "10.0.0.1:9190"
    with pytest.raises(
        SpecError,
        match=r"unknown device 'tpu:0': write cpu, cpu:N, cpu@N, cpu@A-B, cpu-serial, cuda or cuda:N",
    ):
        resolve_device("tpu:0")


def test_vdevice_and_runtime_mapping():
    vdev = to_vdevice(cpu_device(1))
    assert vdev.target.kind.name == "llvm" and int(vdev.vdevice_id) == 1
    assert to_vdevice(cuda_device(0, "sm_80")).target.kind.name == "cuda"
    with pytest.raises(SpecError, match="is simulated"):
        to_vdevice(DeviceSpec("pim", DeviceKind.SIMULATED, profile="paper"))


@pytest.mark.skipif(tvm.cuda(0).exist, reason="checks the error on a GPU-less machine")
def test_missing_gpu_is_a_clear_error():
    with pytest.raises(SpecError, match="cuda:0 is not present on this machine"):
        runtime_device("cuda", 0)


def test_merged_cpu_joins_only_this_hosts_contiguous_core_workers():
    from tvm_hetero.devices.discover import merged_cpu

    pair = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    assert merged_cpu(pair) == cpu_device(cores=(0, 1))
    assert merged_cpu(pair[:1]) is None
    assert merged_cpu([resolve_device("cpu@0"), resolve_device("cpu")]) is None
    # a cluster file's workers with core sets may be another machine's (an offline box)
    boxed = [DeviceSpec(f"box-{k}", "cpu", d.target, index=k, threads=1, cores=d.cores)
             for k, d in enumerate(pair)]  # fmt: skip
    assert merged_cpu(boxed) is None
