"""Make and remove an emulated cluster: namespaces, shaped veths, cgroups and one worker each.

Everything made for a spec carries its tag (:func:`~.layout.cluster_tag`), so :func:`down` finds it
by name alone: after a clean ``up``, a failed one, or one that was killed halfway.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.emulation.layout import CGROUP_PARENT, WORKER_PORT, Layout, Node, up_commands

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "memory")
CFS_PERIOD_US = 5_000
"""The period of a device's CPU quota. A device held to a fraction of a core must be that much
slower at every time scale a plan sees: under the kernel's default 100 ms a worker held to 0.45
core ran 45 ms at full speed and then stood still, so one device's MobileNet took 118-135 ms
or about 197 ms by where its run fell in the period (25 runs: two modes), and a tile of a few
milliseconds ran at full speed; at 5 ms the same runs took 180-211 ms (median 198)."""
MIN_QUOTA_US = 1_000
"""The least quota the kernel takes per period."""
SESSION_BYTES = 256 * 2**20
"""Memory a client's session may take in a worker besides the model (the forked session
process's copied pages, its buffers): link probes' sessions took 30-70 MiB over the idle
worker's 270-320 MiB (page cache included), so this leaves room for a pipeline's buffers."""


class EmulationError(RuntimeError):
    """The emulated cluster could not be made (what failed, and how to see why)."""


def missing_privilege() -> str | None:
    """Why this process cannot make an emulated cluster, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, tc and cgroups); run it as root"
    absent = [tool for tool in ("ip", "tc", "sysctl", "taskset") if shutil.which(tool) is None]
    if absent:
        return f"needs {', '.join(absent)} (iproute2, procps, util-linux)"
    if not all((CGROUP_ROOT / c).is_dir() for c in CONTROLLERS):
        return f"needs cgroup v1 cpu and memory controllers under {CGROUP_ROOT}"
    return None


def log_dir(tag: str) -> Path:
    """Where the workers of cluster ``tag`` write their output."""
    return Path(tempfile.gettempdir()) / "tvm-hetero-cluster" / tag


def _cgroups(tag: str) -> list[Path]:
    return sorted(
        p for c in CONTROLLERS for p in (CGROUP_ROOT / c / CGROUP_PARENT).glob(f"{tag}-*")
    )


def _namespaces(tag: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(w.split()[0] for w in out.splitlines() if w.split()[0].startswith(f"{tag}-"))


def _links(tag: str) -> list[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = (line.split(":")[1].strip().split("@")[0] for line in out.splitlines())
    return sorted(n for n in names if n.startswith(f"{tag}-"))


def _processes(tag: str) -> set[int]:
    pids: set[int] = set()
    for ns in _namespaces(tag):
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        pids |= {int(p) for p in out.split()}
    for group in _cgroups(tag):
        procs = group / "cgroup.procs"
        if procs.exists():
            pids |= {int(p) for p in procs.read_text().split()}
    return pids


def leftovers(tag: str) -> dict[str, list[str]]:
    """What of cluster ``tag`` exists now: namespaces, links, cgroups, processes, log folder."""
    found = {
        "namespaces": _namespaces(tag),
        "links": _links(tag),
        "cgroups": [str(p) for p in _cgroups(tag)],
        "processes": [str(p) for p in sorted(_processes(tag))],
        "logs": [str(log_dir(tag))] if log_dir(tag).exists() else [],
    }
    return {k: v for k, v in found.items() if v}


def down(tag: str) -> dict[str, list[str]]:
    """Remove everything of cluster ``tag`` (idempotent); returns what was there."""
    found = leftovers(tag)
    for pid in map(int, found.get("processes", [])):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _processes(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    for ns in found.get("namespaces", []):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for link in _links(tag):  # the bridge (veth ends went with their namespaces)
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    for group in _cgroups(tag):
        group.rmdir()
    for controller in CONTROLLERS:  # the parent too, once no cluster is left in it
        parent = CGROUP_ROOT / controller / CGROUP_PARENT
        if parent.is_dir() and not any(p.is_dir() for p in parent.iterdir()):
            parent.rmdir()
    shutil.rmtree(log_dir(tag), ignore_errors=True)
    return found


def _sh(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise EmulationError(f"`{' '.join(cmd)}` failed: {done.stderr.strip() or done.returncode}")


def cfs_period_us(quota: float) -> int:
    """:data:`CFS_PERIOD_US`, or longer where ``quota`` cores of it would be under the kernel's
    :data:`MIN_QUOTA_US` (a device of 0.1 core: 10 ms)."""
    return max(CFS_PERIOD_US, math.ceil(MIN_QUOTA_US / quota))


def device_cgroups(node: Node) -> list[Path]:
    """The cgroups of ``node``'s device, one a controller of :data:`CONTROLLERS`."""
    return [CGROUP_ROOT / controller / CGROUP_PARENT / node.namespace for controller in CONTROLLERS]


def _make_cgroups(node: Node) -> list[Path]:
    made = device_cgroups(node)
    for path in made:
        path.mkdir(parents=True, exist_ok=True)
    if node.cpu_quota is not None:
        period = cfs_period_us(node.cpu_quota)
        (made[0] / "cpu.cfs_period_us").write_text(str(period))
        (made[0] / "cpu.cfs_quota_us").write_text(str(round(node.cpu_quota * period)))
    return made


def _hold_memory(node: Node, memory_group: Path) -> None:
    """Limit a started worker to its device's ``memory_bytes`` for the model: the cgroup's limit
    is what the idle worker takes (Python, the TVM runtime and page cache: 270-320 MiB here),
    :data:`SESSION_BYTES`, and ``memory_bytes``. A plan that puts more
    on the device than it declares gets the worker killed by the kernel, as a real device's
    would be."""
    if node.memory_bytes is None:
        return
    idle = int((memory_group / "memory.usage_in_bytes").read_text())
    limit = idle + SESSION_BYTES + node.memory_bytes
    (memory_group / "memory.limit_in_bytes").write_text(str(limit))


def start_on_device(node: Node, argv: list[str], **popen: Any) -> subprocess.Popen:
    """``argv`` as a process of ``node``'s device: in its namespace, on its cores and in its
    cgroups (made by :func:`up`); ``popen``: the rest of ``subprocess.Popen``'s arguments."""
    cmd = ["ip", "netns", "exec", node.namespace]
    if node.cores:
        cmd += ["taskset", "-c", ",".join(map(str, node.cores))]
    groups = device_cgroups(node)

    def join_cgroups() -> None:
        for group in groups:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    return subprocess.Popen(cmd + argv, preexec_fn=join_cgroups, **popen)


def _start_worker(node: Node, logs: Path) -> subprocess.Popen:
    argv = [
        sys.executable, "-m", "tvm_hetero.runtime.rpc_worker", "--host", node.identity,
        "--port", str(WORKER_PORT), "--port-end", str(WORKER_PORT + 1),
        "--cache", str(logs / f"{node.device}-libraries"),  # removed with the logs by down
    ]  # fmt: skip
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")  # what an edge box has: the runtime only
    with open(logs / f"{node.device}.log", "w") as log:
        return start_on_device(
            node, argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )  # fmt: skip


def _wait_listening(node: Node, proc: subprocess.Popen, logs: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            tail = (logs / f"{node.device}.log").read_text().strip().splitlines()[-1:]
            raise EmulationError(
                f"worker of {node.device} exited ({proc.returncode}): {' '.join(tail)}"
            )
        try:
            socket.create_connection((node.identity, WORKER_PORT), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise EmulationError(
                    f"worker of {node.device} not listening on {node.address} after "
                    f"{timeout_s:.0f} s (log: {logs / f'{node.device}.log'})"
                ) from None
            time.sleep(0.1)


def up(
    spec: ClusterSpec, layout: Layout, timeout_s: float = 60.0,
    progress: Callable[[str], None] = lambda _: None,
) -> ClusterSpec:  # fmt: skip
    """Make ``layout`` and start its workers; the cluster with the workers' addresses.

    Each worker has ``timeout_s`` to listen, over its CPU quota for one held to less than a
    core (it starts at the pace the quota allows).

    Whatever an earlier ``up`` of the same tag left is removed first; on any failure everything
    made is removed again before :class:`EmulationError` is raised.
    """
    down(layout.tag)
    logs = log_dir(layout.tag)
    try:
        progress(f"network: {len(layout.nodes)} namespaces, {layout.shaped_links} shaped links")
        for cmd in up_commands(layout):
            _sh(cmd)
        logs.mkdir(parents=True, exist_ok=True)
        procs, groups = [], []
        for node in layout.nodes:
            groups.append(_make_cgroups(node))
            procs.append(_start_worker(node, logs))
        for node, proc, made in zip(layout.nodes, procs, groups, strict=True):
            # a worker held to a tenth of a core takes ten times as long to start
            _wait_listening(node, proc, logs, timeout_s / min(1.0, node.cpu_quota or 1.0))
            _hold_memory(node, made[1])
            progress(f"worker {node.device} listening on {node.address} in {node.namespace}")
    except BaseException:
        down(layout.tag)
        raise
    devices = tuple(replace(d, host=layout.node(d.name).address) for d in spec.devices)
    return replace(spec, devices=devices)
