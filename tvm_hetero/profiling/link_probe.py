"""Probe the links of a cluster of ``tvm-hetero worker`` processes: bandwidth and latency.

For a link ``a - b``, worker ``b`` holds payloads of several sizes and worker ``a`` pulls each
through the tensor link (the path a model's tensors take), timed on ``a``; a fit of
``latency + bytes / bandwidth`` over the sizes gives the link's figures. Every timing goes to the
profile database as a ``transfer`` record keyed by the receiving device's fingerprint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tvm_hetero.costmodel.transfer import TransferFit
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.devices.spec import DeviceSpec, Link
from tvm_hetero.errors import RunError
from tvm_hetero.records import ProfileRecord, RecordKind
from tvm_hetero.runtime.remote_worker import connect_worker
from tvm_hetero.runtime.rpc_worker import PREFIX
from tvm_hetero.runtime.timer import remote_fingerprint

MODE = "tensor-link"


def probe_sizes(bandwidth_mbps: float, seconds: float = 0.25) -> list[int]:
    """Payload sizes for a link of ``bandwidth_mbps``: 4 KiB and 64 KiB for the latency, and up
    to what takes about ``seconds`` at that rate (256 KiB to 64 MiB) for the bandwidth."""
    largest = int(np.clip(bandwidth_mbps * 1e6 / 8 * seconds, 256 * 1024, 64 * 2**20))
    return sorted({4096, 65536, largest // 4, largest})


@dataclass(frozen=True)
class LinkProbe:
    """One probed link: the spec's figures, the fit and the records measured."""

    link: Link
    fit: TransferFit
    records: tuple[ProfileRecord, ...]

    @property
    def bandwidth_mbps(self) -> float:
        return self.fit.bandwidth_bps * 8 / 1e6

    @property
    def latency_ms(self) -> float:
        return self.fit.latency_s * 1e3


def _session(spec: DeviceSpec) -> tuple[Any, tuple[str, int]]:
    try:
        return connect_worker(spec)
    except RunError as err:
        raise ConnectionError(str(err)) from None


def check_reachable(cluster: ClusterSpec) -> None:
    """Open and close a session with every worker; ``ConnectionError`` naming the first that
    cannot be reached, ``ValueError`` for a device without a worker."""
    for device in cluster.devices:
        _session(device)  # dropped at once: the worker takes the next session


def probe_link(
    cluster: ClusterSpec, link: Link, repeat: int = 5, sizes: list[int] | None = None
) -> LinkProbe:
    """Measure ``link``: worker ``link.a`` pulls payloads from worker ``link.b``.

    Raises
    ------
    ConnectionError
        When a worker cannot be reached, naming it.
    """
    a, b = cluster.device(link.a), cluster.device(link.b)
    sizes = sizes or probe_sizes(link.bandwidth_mbps)
    (receiver, at_a), (sender, at_b) = _session(a), _session(b)  # (ValueError: no worker)
    fill, pull = sender.get_function(PREFIX + "fill"), receiver.get_function(PREFIX + "probe")
    sender_host = at_b[0]
    fingerprint = remote_fingerprint(receiver, a, f"{at_a[0]}:{at_a[1]}")
    records = []
    for nbytes in sizes:
        port = int(fill(f"probe{nbytes}", nbytes))
        seconds = tuple(json.loads(pull(sender_host, port, f"probe{nbytes}", repeat)))
        workload = {"op": "link", "src": b.name, "dst": a.name, "src_host": b.host,
                    "bytes": int(nbytes)}  # fmt: skip
        records.append(
            ProfileRecord(
                RecordKind.TRANSFER,
                f"link:{b.host}:{nbytes}",
                workload,
                "tcp",
                MODE,
                fingerprint.to_dict(),
                fingerprint.key,
                seconds,
                1,
                len(seconds),
            )
        )
    fit = link_fit([r.workload["bytes"] for r in records], [r.median_s for r in records])
    return LinkProbe(link, fit, tuple(records))


def link_fit(sizes_bytes: list[int], seconds: list[float]) -> TransferFit:
    """Bandwidth from the slope between the two largest payloads, latency from the smallest.

    A shaped link (a token bucket) lets a burst through at wire speed, so small payloads say
    nothing of its rate, and a fit over all sizes (:func:`fit_transfer`) is pulled off by them.
    """
    order = np.argsort(sizes_bytes)
    x, y = np.asarray(sizes_bytes, float)[order], np.asarray(seconds, float)[order]
    bandwidth = (x[-1] - x[-2]) / max(y[-1] - y[-2], 1e-9)
    latency = max(0.0, y[0] - x[0] / bandwidth)
    predicted = latency + x / bandwidth
    return TransferFit(latency, float(bandwidth), float(np.mean(np.abs(predicted - y) / y)))


def measured_cluster(cluster: ClusterSpec, probes: list[LinkProbe]) -> ClusterSpec:
    """``cluster`` with each probed link's bandwidth and latency as measured."""
    by_pair = {frozenset((p.link.a, p.link.b)): p for p in probes}
    links = tuple(
        replace(ln, bandwidth_mbps=round(p.bandwidth_mbps, 3), latency_ms=round(p.latency_ms, 4))
        if (p := by_pair.get(frozenset((ln.a, ln.b)))) is not None
        else ln
        for ln in cluster.links
    )
    return replace(cluster, links=links)
