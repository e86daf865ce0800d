"""Whole-model timings: end-to-end latency percentiles, and every operator's time in one run."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from tvm_hetero._compat import vdevice_equal
from tvm_hetero.build.multi_device import BuildOptions, build, lower
from tvm_hetero.build.vdevices import cpu_threads, runtime_devices
from tvm_hetero.ir.attrs import CALL_TIR_OP, COPY_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import op_bindings
from tvm_hetero.ir.types import tensor_infos
from tvm_hetero.runtime.worker import use_threads

COPY_SYMBOL = "vm.builtin.to_device"
CPU_DEVICE = 1
"""DLPack's ``kDLCPU``: every other device runs its kernels asynchronously to the host."""


@dataclass(frozen=True)
class OpTimes:
    """Per-operator times of one instrumented run.

    Attributes
    ----------
    node_seconds : dict[str, float]
        Operator (binding) id -> seconds: kernels and ``to_vdevice`` copies.
    total_s : float
        Sum of ``node_seconds``.
    wall_s : float
        Wall time of the same (instrumented) run.
    """

    node_seconds: dict[str, float]
    total_s: float
    wall_s: float
    copies: dict[str, tuple[int, int, str, int]]
    """Copy binding id -> (source vdevice, destination vdevice, dtype, elements)."""


def kernel_sequence(lowered: tvm.IRModule) -> list[tuple[str, str]]:
    """``(binding id, VM symbol)`` of every kernel call and copy in ``main``, in run order."""
    seq = []
    for b in op_bindings(lowered[ENTRY_FUNC]):
        op = b.call.op
        if isinstance(op, tvm.ir.Op) and op.name == CALL_TIR_OP:
            seq.append((b.node_id, b.call.args[0].name_hint))
        elif isinstance(op, tvm.ir.Op) and op.name == COPY_OP:
            seq.append((b.node_id, COPY_SYMBOL))
    return seq


def per_op_times(
    placed: tvm.IRModule,
    args: Sequence[np.ndarray],
    options: BuildOptions | None = None,
    runs: int = 3,
) -> OpTimes:
    """Time every operator inside whole-model runs (median of ``runs``), through VM instrumentation.

    The module is built without fusion so that each kernel is one operator, and the k-th call of a
    kernel symbol is matched to the k-th binding that calls it: a single run yields every node cost
    of an assignment (Lee et al.). Copies (``to_vdevice``) are timed too.
    """
    options = dataclasses.replace(options or BuildOptions(), fuse=False)
    lowered = lower(placed, options)
    by_symbol: dict[str, list[str]] = defaultdict(list)
    for node, symbol in kernel_sequence(lowered):
        by_symbol[symbol].append(node)
    vdevices = list(placed.global_infos["vdevice"])
    devs = runtime_devices(vdevices)
    use_threads(cpu_threads(vdevices))
    vm = relax.VirtualMachine(build(placed, options), devs)
    tensors = [tvm.runtime.tensor(a, devs[0]) for a in args]
    vm[ENTRY_FUNC](*tensors)  # warm-up: first-run allocation is not an operator's cost
    recorder = _Recorder(by_symbol, [d for d in devs if d.dlpack_device_type() != CPU_DEVICE])
    vm.set_instrument(recorder)
    walls = []
    for _ in range(runs):
        recorder.seen.clear()
        start = time.perf_counter()
        vm[ENTRY_FUNC](*tensors)
        walls.append(time.perf_counter() - start)
    samples = recorder.samples
    node_seconds = {n: float(np.median(s)) for n, s in samples.items()}
    return OpTimes(
        node_seconds, sum(node_seconds.values()), float(np.median(walls)), copy_attributes(lowered)
    )


def copy_attributes(mod: tvm.IRModule) -> dict[str, tuple[int, int, str, int]]:
    """Each ``to_vdevice`` binding of ``main``: (source, destination vdevice, dtype, elements)."""
    vdevices = list(mod.global_infos["vdevice"])

    def index(vdev) -> int:
        return next(i for i, v in enumerate(vdevices) if vdevice_equal(v, vdev))

    out = {}
    for b in op_bindings(mod[ENTRY_FUNC]):
        op = b.call.op
        if isinstance(op, tvm.ir.Op) and op.name == COPY_OP:
            (info,) = tensor_infos(b.call.args[0].ty)
            src = b.call.args[0].ty.vdevice
            out[b.node_id] = (
                0 if src is None else index(src),
                index(b.var.ty.vdevice),
                info.dtype,
                info.numel or 0,
            )
    return out


class _Recorder:
    """VM instrument: times each kernel / copy call and files it under its operator.

    A GPU kernel call returns once the kernel is launched: each call is timed between two
    synchronisations of every accelerator, so the time is the kernel's, not its launch's (lstm's
    kernels on an H100 summed 190 us unsynchronised against 343 us synchronised, which made the
    CPU look the faster device).
    """

    def __init__(self, by_symbol: dict[str, list[str]], accelerators: Sequence = ()) -> None:
        self.by_symbol = by_symbol
        self.accelerators = list(accelerators)
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.seen: dict[str, int] = defaultdict(int)
        self.started: dict[str, float] = {}

    def _now(self) -> float:
        for dev in self.accelerators:
            dev.sync()
        return time.perf_counter()

    def __call__(self, func, symbol, before, ret, *args) -> int:
        if symbol not in self.by_symbol:
            return 0
        if before:
            self.started[symbol] = self._now()
            return 0
        elapsed = self._now() - self.started[symbol]
        nodes = self.by_symbol[symbol]
        node = nodes[self.seen[symbol] % len(nodes)]
        self.seen[symbol] += 1
        self.samples[node].append(elapsed)
        return 0
