"""One Relax VM over a multi-vdevice executable (the profiler's workloads, per-operator runs)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tvm
from tvm.runtime.vm import VirtualMachine

from tvm_hetero.ir.attrs import ENTRY_FUNC


def make_vm(
    executable: tvm.runtime.Executable | tvm.runtime.Module, devices: Sequence[tvm.runtime.Device]
) -> VirtualMachine:
    """A VM over ``devices`` given in vdevice order."""
    return VirtualMachine(executable, list(devices))


def to_numpy(result: object) -> list[np.ndarray]:
    """Flatten a VM result (tensor or nested tuple) into numpy arrays."""
    if isinstance(result, tvm.runtime.Tensor):
        return [result.numpy()]
    return [a for item in result for a in to_numpy(item)]  # type: ignore[attr-defined]


def run(
    vm: VirtualMachine, args: Sequence[np.ndarray], home: tvm.runtime.Device
) -> list[np.ndarray]:
    """Run ``main`` once on inputs placed on the home device; return the outputs as numpy."""
    tensors = [tvm.runtime.tensor(a, home) for a in args]
    return to_numpy(vm[ENTRY_FUNC](*tensors))
