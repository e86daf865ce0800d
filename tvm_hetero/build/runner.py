"""Run and time a compiled multi-device module on the Relax VM."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

from tvm_hetero.ir.attrs import ENTRY_FUNC


def set_cpu_threads(threads: int) -> None:
    """Use ``threads`` CPU worker threads (TVM's default is half the cores).

    TVM fixes its pool size from ``TVM_NUM_THREADS`` when the pool first starts, so call this
    before the first run in the process.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    os.environ["TVM_NUM_THREADS"] = str(threads)
    tvm.get_global_func("runtime.config_threadpool")(1, threads)


def make_vm(
    executable: tvm.runtime.Executable | tvm.runtime.Module, devices: Sequence[tvm.runtime.Device]
) -> relax.VirtualMachine:
    """A VM over ``devices`` given in vdevice order."""
    return relax.VirtualMachine(executable, list(devices))


def to_numpy(result: object) -> list[np.ndarray]:
    """Flatten a VM result (tensor or nested tuple) into numpy arrays."""
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    return [a for item in result for a in to_numpy(item)]  # type: ignore[attr-defined]


def run(
    vm: relax.VirtualMachine, args: Sequence[np.ndarray], home: tvm.runtime.Device
) -> list[np.ndarray]:
    """Run ``main`` once on inputs placed on the home device; return the outputs as numpy."""
    tensors = [tvm.runtime.tensor(a, home) for a in args]
    return to_numpy(vm[ENTRY_FUNC](*tensors))


@dataclass(frozen=True)
class LatencyStats:
    """Latency of repeated end-to-end runs, in milliseconds."""

    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        """Median latency."""
        return float(np.median(self.samples_ms))

    @property
    def p99_ms(self) -> float:
        """99th-percentile latency."""
        return float(np.percentile(self.samples_ms, 99))

    @property
    def mean_ms(self) -> float:
        """Mean latency."""
        return float(np.mean(self.samples_ms))

    @property
    def std_ms(self) -> float:
        """Standard deviation."""
        return float(np.std(self.samples_ms))


def time_run(
    vm: relax.VirtualMachine,
    args: Sequence[np.ndarray],
    home: tvm.runtime.Device,
    repeat: int = 20,
    number: int = 1,
) -> LatencyStats:
    """Time ``main`` with ``time_evaluator`` (one warm-up run excluded); one sample per repeat."""
    if repeat < 1 or number < 1:
        raise ValueError(f"repeat and number must be >= 1, got repeat={repeat}, number={number}")
    tensors = [tvm.runtime.tensor(a, home) for a in args]
    result = vm.time_evaluator(ENTRY_FUNC, home, number=number, repeat=repeat)(*tensors)
    return LatencyStats(tuple(float(s) * 1e3 for s in result.results))
