"""Time executables with ``time_evaluator``, here or on a TVM RPC server, with adaptive repeats."""

from __future__ import annotations

import dataclasses
import gc
import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import tvm
from tvm.runtime.vm import VirtualMachine

from tvm_hetero.devices.spec import DeviceSpec, split_address
from tvm_hetero.ir.attrs import ENTRY_FUNC
from tvm_hetero.records import Fingerprint
from tvm_hetero.runtime.device import local_fingerprint
from tvm_hetero.runtime.measure import MeasureConfig, Timing, adaptive

DeviceRef = tuple[str, int]
"""``(target kind, index)`` of a vdevice: ``("llvm", 1)``, ``("cuda", 0)``."""


class Runner(Protocol):
    """Where executables run: this process or a remote TVM RPC server."""

    where: str

    def time(
        self, executable: tvm.runtime.Executable, devices: Sequence[DeviceRef],
        args: Sequence[np.ndarray], config: MeasureConfig,
    ) -> Timing:  # fmt: skip
        """Time ``main`` with ``args`` placed on ``devices[0]``."""

    def fingerprint(self, spec: DeviceSpec) -> Fingerprint:
        """The fingerprint of a device as this runner sees it."""

    def close(self) -> None:
        """End what the runner holds open now (a remote session); nothing for this process."""


class LocalRunner:
    """Times executables in this process."""

    where = "local"

    def time(self, executable, devices, args, config):
        from tvm_hetero.runtime.device import vdevice_runtime_device

        devs = [vdevice_runtime_device(k, i) for k, i in devices]
        vm = VirtualMachine(executable, devs)
        tensors = [tvm.runtime.tensor(a, devs[0]) for a in args]
        return adaptive(
            lambda n, r: vm.time_evaluator(ENTRY_FUNC, devs[0], number=n, repeat=r)(*tensors),
            config,
        )

    def fingerprint(self, spec: DeviceSpec) -> Fingerprint:
        kind = "cuda" if spec.kind.value == "cuda" else "cpu"
        fp = local_fingerprint(
            kind, spec.index, spec.threads, spec.target.get("mcpu", ""), spec.cores
        )
        return with_quota(fp, spec)

    def close(self) -> None:
        """Nothing held open: executables run in this process."""


class RPCRunner:
    """Compiles here, uploads, and times on a TVM RPC server (``tvm.rpc`` or our ``rpc_worker``).

    Multi-device executables are driven through ``set_input`` / ``invoke_stateful``: a direct call
    over RPC fails to convert its arguments in 0.27.
    """

    def __init__(
        self, host: str, port: int, key: str = "", timeout_s: float = 60, session: Any = None
    ) -> None:
        """Connect to ``host:port``, or time on ``session`` (one already open there).

        ``timeout_s`` bounds a session's whole life (TVM's ``session_timeout``), so a hung server
        is reported; a session this runner opened is renewed once half of it has passed, so a
        long series of measurements (trace collection) never runs into it."""
        self.host, self.port, self.key, self.timeout_s = host, port, key, timeout_s
        self.where = f"{host}:{port}"
        self.session = session
        self._count = 0
        self._opened: float | None = None
        if session is None:
            self._connect()

    def _connect(self) -> None:
        self.session = None  # a server serves one session at a time: end the old one first
        try:
            self.session = tvm.rpc.connect(
                self.host, self.port, key=self.key, session_timeout=self.timeout_s
            )
        except (RuntimeError, OSError) as err:
            raise ConnectionError(
                f"cannot reach the TVM RPC server at {self.where}: {err}"
            ) from None
        self._opened = time.monotonic()

    def _device(self, kind: str, index: int) -> tvm.runtime.Device:
        return self.session.cuda(index) if kind == "cuda" else self.session.cpu(index)

    def time(self, executable, devices, args, config):
        if self._opened is not None and time.monotonic() - self._opened > self.timeout_s / 2:
            self._connect()
        self._count += 1
        name = f"tvm_hetero_{self._count}.so"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            executable.export_library(str(path))
            self._upload(path, name)
        lib = self.session.load_module(name)
        devs = [self._device(k, i) for k, i in devices]
        vm = VirtualMachine(lib, devs)
        vm.set_input(ENTRY_FUNC, *[tvm.runtime.tensor(a, devs[0]) for a in args])
        return adaptive(
            lambda n, r: vm.time_evaluator("invoke_stateful", devs[0], number=n, repeat=r)(
                ENTRY_FUNC
            ),
            config,
        )

    def _upload(self, path: Path, name: str) -> None:
        """``path`` to the server as ``name``: over a ``tvm-hetero worker``'s data port
        (:mod:`.uploads`, 25 times TVM RPC's rate on loopback, and kept there by content), else
        by TVM RPC's own upload."""
        from tvm_hetero.runtime.rpc_worker import PREFIX
        from tvm_hetero.runtime.uploads import upload

        try:
            data_port = self.session.get_function(PREFIX + "data_port")
        except (AttributeError, RuntimeError):
            data_port = None
        if data_port is None:  # a plain tvm.rpc server
            self.session.upload(str(path))
        else:
            upload(self.host, int(data_port()), path, name, self.timeout_s)

    def fingerprint(self, spec: DeviceSpec) -> Fingerprint:
        return remote_fingerprint(self.session, spec, self.where)

    def close(self) -> None:
        """End the session now (a server serves one at a time): what a measurement made holds
        it in reference cycles, and left to the collector it lived on until its timeout, so the
        next measurement on that worker waited 59 s to connect (every other subgraph of
        MT-DNN's DUET costs on the emulated mesh)."""
        self.session = None
        gc.collect()


def close_runners(runners: Mapping[str, Runner]) -> None:
    """End every session of ``runners`` now (:meth:`RPCRunner.close`): dropped instead, a
    session held in reference cycles lives on to its timeout and the worker, serving one at a
    time, keeps the next measurement waiting."""
    for runner in {id(r): r for r in runners.values()}.values():
        runner.close()


def remote_fingerprint(session: Any, spec: DeviceSpec, where: str) -> Fingerprint:
    """``spec``'s device as the RPC server at ``where`` describes it (a plain ``tvm.rpc`` server
    cannot: an "unknown" device of that host). A TVM RPC server serves one session at a time, so
    this asks over the caller's session."""
    kind = "cuda" if spec.kind.value == "cuda" else "cpu"
    try:
        remote = session.get_function("tvm_hetero.fingerprint")
        data = json.loads(remote(kind, spec.index, spec.threads or 0))
    except (AttributeError, RuntimeError):  # a plain tvm.rpc server
        data = {"kind": kind, "name": f"unknown {kind}", "threads": spec.threads,
                "tvm": tvm.__version__}  # fmt: skip
    data["host"] = where
    return with_quota(Fingerprint(**data), spec)


def with_quota(fp: Fingerprint, spec: DeviceSpec) -> Fingerprint:
    """A device held to a CPU quota is not the same device at another quota: its records must
    not be served for it (the quota is named only when there is one, so other keys stay)."""
    if spec.cpu_quota is None:
        return fp
    return dataclasses.replace(fp, name=f"{fp.name} (cpu quota {spec.cpu_quota:g} cores)")


def _runner(device: DeviceSpec, where: str | None) -> Runner:
    if device.key is not None:  # a worker the tracker at device.host hands out
        from tvm_hetero.runtime.remote_worker import connect_worker

        session, (host, port) = connect_worker(device)
        return RPCRunner(host, port, session=session)
    return RPCRunner(*split_address(where)) if where else LocalRunner()


def runners_for(devices: Sequence[DeviceSpec], remote: str | None = None) -> dict[str, Runner]:
    """Each device's runner: its own worker for a device with a host, else ``--remote`` (one
    session per address: a TVM RPC server serves one at a time), else this process."""
    if remote and split_address(remote) is None:
        raise ValueError(f"--remote {remote!r}: write HOST:PORT")
    sessions: dict[str | None, Runner] = {}
    runners = {}
    for d in devices:
        where = d.worker_id or remote
        if where not in sessions:
            sessions[where] = _runner(d, where)
        runners[d.name] = sessions[where]
    return runners


def cold_rounds(
    executables: Sequence[tvm.runtime.Executable], args: Sequence[np.ndarray], rounds: int,
) -> list[list[float]]:  # fmt: skip
    """Seconds of one run of each executable's ``main`` on this CPU, in ``rounds`` interleaved
    rounds (``[round][executable]``), as a layer runs inside a model: before each run
    :func:`sweep_bytes` are written over the cache (the other layers' weights evicted the
    layer's own), then the inputs are written (the layer before made them, so they are in
    cache)."""
    vms = [VirtualMachine(ex, tvm.cpu()) for ex in executables]
    tensors = [tvm.runtime.tensor(a, tvm.cpu()) for a in args]
    mains = [vm[ENTRY_FUNC] for vm in vms]
    for main in mains:
        main(*tensors)  # warm-up: first-run allocations
    sweep = np.zeros(sweep_bytes() // 4, "float32")
    times = []
    for _ in range(rounds):
        row = []
        for main in mains:
            sweep += 1.0
            for tensor, a in zip(tensors, args, strict=True):
                tensor.copyfrom(a)
            start = time.perf_counter()
            main(*tensors)
            row.append(time.perf_counter() - start)
        times.append(row)
    return times


SWEEP_MAX_BYTES = 64 << 20
"""The most bytes :func:`cold_rounds` writes before each run. A VM reports its socket's last
level cache, not its share: 300 MiB on a 2-core Intel Xeon (Emerald Rapids), where sweeping
twice that took about 0.15 s a run and GoogLeNet's first compile, which measures nine 3x3
convolutions 45 runs each, 65 s of wall time (the goal is under 60)."""


def sweep_bytes() -> int:
    """Bytes written over the cache before each run of :func:`cold_rounds`: twice the last
    level cache, at most :data:`SWEEP_MAX_BYTES` (twice Zen 4's 32 MiB)."""
    return min(2 * last_level_cache_bytes(), SWEEP_MAX_BYTES)


def last_level_cache_bytes() -> int:
    """The largest cache of CPU 0 as Linux reports it (``/sys/.../cache/index*/size``); 32 MiB
    when it does not."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=32 << 20)
