"""Device and cluster specs, discovery of this machine's devices."""

from tvm_hetero.devices.cluster import ClusterSpec, topology_pairs
from tvm_hetero.devices.discover import cpu_device, cuda_device, discover, gpu_count, resolve_device
from tvm_hetero.devices.spec import DeviceKind, DeviceSpec, Link, SpecError, Topology

__all__ = [
    "ClusterSpec",
    "DeviceKind",
    "DeviceSpec",
    "Link",
    "SpecError",
    "Topology",
    "cpu_device",
    "cuda_device",
    "discover",
    "gpu_count",
    "resolve_device",
    "topology_pairs",
]
