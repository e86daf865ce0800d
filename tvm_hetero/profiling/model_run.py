"""Whole-model timings: end-to-end latency percentiles, and every operator's time in one run."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm

from tvm_hetero._compat import vdevice_equal
from tvm_hetero.build.multi_device import BuildOptions, build, lower
from tvm_hetero.build.vdevices import cpu_threads, runtime_devices
from tvm_hetero.ir.attrs import CALL_TIR_OP, COPY_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import calls_op, op_bindings
from tvm_hetero.ir.types import tensor_infos
from tvm_hetero.runtime.instrument import op_times
from tvm_hetero.runtime.worker import use_threads

COPY_SYMBOL = "vm.builtin.to_device"


@dataclass(frozen=True)
class OpTimes:
    """Per-operator times of instrumented runs (each operator's median over the runs).

    Attributes
    ----------
    node_seconds : dict[str, float]
        Operator (binding) id -> seconds: kernels and ``to_vdevice`` copies.
    total_s : float
        Sum of ``node_seconds``.
    wall_s : float
        Median wall time of the same (instrumented) runs. Of one run, at least ``total_s``;
        over several the operators' medians may sum past it.
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
        if calls_op(b.call, CALL_TIR_OP):
            seq.append((b.node_id, b.call.args[0].name_hint))
        elif calls_op(b.call, COPY_OP):
            seq.append((b.node_id, COPY_SYMBOL))
    return seq


@dataclass(frozen=True)
class OpTimesWorkload:
    """A placed model built for per-operator timing: without fusion (one kernel per operator),
    with which operators each kernel symbol's calls are, in order, and its copies."""

    executable: tvm.runtime.Executable
    by_symbol: dict[str, list[str]]
    copies: dict[str, tuple[int, int, str, int]]


def op_times_workload(placed: tvm.IRModule, options: BuildOptions | None = None) -> OpTimesWorkload:
    """What :func:`~tvm_hetero.runtime.instrument.op_times` times, here or on another machine."""
    options = dataclasses.replace(options or BuildOptions(), fuse=False)
    lowered = lower(placed, options)
    by_symbol: dict[str, list[str]] = defaultdict(list)
    for node, symbol in kernel_sequence(lowered):
        by_symbol[symbol].append(node)
    return OpTimesWorkload(build(placed, options), dict(by_symbol), copy_attributes(lowered))


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
    work = op_times_workload(placed, options)
    vdevices = list(placed.global_infos["vdevice"])
    use_threads(cpu_threads(vdevices))
    devices = runtime_devices(vdevices)
    node_seconds, walls = op_times(work.executable, devices, args, work.by_symbol, runs)
    return OpTimes(node_seconds, sum(node_seconds.values()), float(np.median(walls)), work.copies)


def copy_attributes(mod: tvm.IRModule) -> dict[str, tuple[int, int, str, int]]:
    """Each ``to_vdevice`` binding of ``main``: (source, destination vdevice, dtype, elements)."""
    vdevices = list(mod.global_infos["vdevice"])

    def index(vdev) -> int:
        return next(i for i, v in enumerate(vdevices) if vdevice_equal(v, vdev))

    out = {}
    for b in op_bindings(mod[ENTRY_FUNC]):
        if calls_op(b.call, COPY_OP):
            (info,) = tensor_infos(b.call.args[0].ty)
            src = b.call.args[0].ty.vdevice
            out[b.node_id] = (
                0 if src is None else index(src),
                index(b.var.ty.vdevice),
                info.dtype,
                info.numel or 0,
            )
    return out
