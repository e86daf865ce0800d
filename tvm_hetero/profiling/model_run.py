"""Whole-model timings: end-to-end latency percentiles, and every operator's time in one run."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm.ir.expr import Constant

from tvm_hetero._compat import vdevice_equal
from tvm_hetero.build.multi_device import BuildOptions, build_lowered, lower
from tvm_hetero.build.vdevices import cpu_threads, runtime_devices
from tvm_hetero.ir.attrs import CALL_TIR_OP, COPY_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import calls_op, iter_bindings, op_bindings
from tvm_hetero.ir.mutate import with_marked_bindings
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


def kernel_sequence(
    lowered: tvm.IRModule, names: Mapping[str, str]
) -> list[tuple[str | None, str]]:
    """``(operator id, VM symbol)`` of every kernel call and copy in ``main``, in run order
    (the k-th call of a symbol is its k-th entry); ``None`` for a call of no operator.

    ``names``: each marked operator binding's operator id (:func:`with_marked_bindings`). A
    kernel whose binding is no operator's was emitted by a rewrite ahead of the operator it
    rewrites (a Winograd convolution's input transform, a grouped convolution's groups, the
    products a gather of weights feeds): it is filed under the next operator's binding, and
    kernels after the last one under the last. An operator a rewrite merged into another's
    kernel (a gather read in place, branches summed into one convolution) has none. Copies
    are the placement's (marked); those a pass makes of weights (``ConstantsToKernelDevices``)
    are no operator's (``None``: counted among the copies, or the placement's read the
    weights' times), and a placed weight's copy that ``ConstantsOnCPUsUncopied`` made the
    weight itself takes no kernel."""
    seq: list[tuple[str | None, str]] = []
    pending: list[tuple[bool, str]] = []  # (whose: the next operator's, or no one's), symbol
    node = None
    for _, _, b in iter_bindings(lowered[ENTRY_FUNC]):
        marked = str(b.var.name) in names
        if calls_op(b.value, CALL_TIR_OP):
            pending.append((True, b.value.args[0].name_hint))
        elif calls_op(b.value, COPY_OP):
            pending.append((marked, COPY_SYMBOL))
        if marked and not isinstance(b.value, Constant):
            node = names[str(b.var.name)]
            seq.extend((node if own else None, s) for own, s in pending)
            pending = []
    seq.extend((node if own else None, s) for own, s in pending)
    return seq


@dataclass(frozen=True)
class OpTimesWorkload:
    """A placed model built for per-operator timing: without fusion (each operator its own
    kernels), with which operators each kernel symbol's calls are, in order, and its copies."""

    executable: tvm.runtime.Executable
    by_symbol: dict[str, list[str | None]]
    copies: dict[str, tuple[int, int, str, int]]


def op_times_workload(placed: tvm.IRModule, options: BuildOptions | None = None) -> OpTimesWorkload:
    """What :func:`~tvm_hetero.runtime.instrument.op_times` times, here or on another machine."""
    options = dataclasses.replace(options or BuildOptions(), fuse=False)
    marked, names = with_marked_bindings(placed, ENTRY_FUNC)
    lowered = lower(marked, options)
    by_symbol: dict[str, list[str | None]] = defaultdict(list)
    for node, symbol in kernel_sequence(lowered, names):
        by_symbol[symbol].append(node)
    copies = copy_attributes(lowered, names)
    return OpTimesWorkload(build_lowered(lowered, options), dict(by_symbol), copies)


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


def copy_attributes(
    mod: tvm.IRModule, names: Mapping[str, str]
) -> dict[str, tuple[int, int, str, int]]:
    """Each ``to_vdevice`` binding of ``main`` that was the placement's (``names``: the marked
    bindings', :func:`kernel_sequence`): (source, destination vdevice, dtype, elements), by
    its operator id. A pass's copies of weights are none of them."""
    vdevices = list(mod.global_infos["vdevice"])

    def index(vdev) -> int:
        return next(i for i, v in enumerate(vdevices) if vdevice_equal(v, vdev))

    out = {}
    for b in op_bindings(mod[ENTRY_FUNC]):
        if calls_op(b.call, COPY_OP) and str(b.var.name) in names:
            (info,) = tensor_infos(b.call.args[0].ty)
            src = b.call.args[0].ty.vdevice
            out[names[str(b.var.name)]] = (
                0 if src is None else index(src),
                index(b.var.ty.vdevice),
                info.dtype,
                info.numel or 0,
            )
    return out
