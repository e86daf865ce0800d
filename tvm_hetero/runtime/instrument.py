"""Every operator's time inside whole-model runs: a VM instrument around each kernel call.

Runtime only: the per-operator runs of EOP and Lee et al. run here, and on a box with the TVM
runtime alone (``tvm-hetero measure``). Which kernel call is which operator is decided where the
model is compiled (:func:`tvm_hetero.profiling.model_run.op_times_workload`): the k-th call of a
kernel symbol is the k-th binding that calls it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tvm
from tvm.runtime.vm import VirtualMachine

from tvm_hetero.ir.attrs import ENTRY_FUNC

CPU_DEVICE = 1
"""DLPack's ``kDLCPU``: every other device runs its kernels asynchronously to the host."""


class KernelTimer:
    """VM instrument: times each kernel / copy call and files it under its operator.

    A GPU kernel call returns once the kernel is launched: each call is timed between two
    synchronisations of every accelerator, so the time is the kernel's, not its launch's (lstm's
    kernels on an H100 summed 190 us unsynchronised against 343 us synchronised, which made the
    CPU look the faster device).
    """

    def __init__(
        self, by_symbol: Mapping[str, Sequence[str | None]], accelerators: Sequence = ()
    ) -> None:
        self.by_symbol = by_symbol
        self.accelerators = list(accelerators)
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.seen: dict[str, int] = defaultdict(int)
        self.started: dict[str, float] = {}
        self.run: dict[str, float] = defaultdict(float)

    def finish_run(self) -> None:
        """File each operator's time in the run just ended (the sum of its kernels: a rewrite
        may make several of one operator) as one sample, and start the next run's."""
        for node, seconds in self.run.items():
            self.samples[node].append(seconds)
        self.run.clear()
        self.seen.clear()

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
        if node is not None:  # a call of no operator (a pass's copy of a weight)
            self.run[node] += elapsed
        return 0


def op_times(
    library: Any, devices: Sequence[tvm.runtime.Device], args: Sequence[np.ndarray],
    by_symbol: Mapping[str, Sequence[str | None]], runs: int = 3,
) -> tuple[dict[str, float], list[float]]:  # fmt: skip
    """``({operator: median seconds}, wall seconds of each run)`` over ``runs`` instrumented runs
    of ``library``'s ``main`` (after one warm-up: first-run allocation is no operator's cost)."""
    vm = VirtualMachine(library, list(devices))
    tensors = [tvm.runtime.tensor(a, devices[0]) for a in args]
    vm[ENTRY_FUNC](*tensors)
    accelerators = [d for d in devices if d.dlpack_device_type() != CPU_DEVICE]
    timer = KernelTimer(by_symbol, accelerators)
    vm.set_instrument(timer)
    walls = []
    for _ in range(runs):
        start = timer._now()
        vm[ENTRY_FUNC](*tensors)
        walls.append(timer._now() - start)
        timer.finish_run()
    node_seconds = {n: float(np.median(s)) for n, s in timer.samples.items()}
    return node_seconds, walls
