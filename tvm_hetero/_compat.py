"""The one place that papers over TVM API drift.

tvm-hetero is written against ``apache-tvm==0.27.0.post1``. Names that moved between releases
(``VDevice``, ``tirx``, ``s_tir.dlight``, ``expr.ty``, dict-form targets) are resolved here so the
rest of the package reads like current TVM.
"""

from __future__ import annotations

import functools
from typing import Any

import tvm
from tvm import relax

try:  # 0.27.0.post1 wheel
    from tvm.relax import VDevice
except ImportError:  # pragma: no cover - main branch after 0.27
    from tvm.ir import VDevice  # type: ignore[no-redef]

from tvm import tirx
from tvm.s_tir import dlight, renew_defs
from tvm.s_tir.analysis import estimate_tir_flops

PrimFunc = tirx.PrimFunc
TensorType = relax.TensorType
TupleType = relax.TupleType

__all__ = [
    "PrimFunc",
    "TensorType",
    "TupleType",
    "VDevice",
    "dlight",
    "estimate_tir_flops",
    "host_cpu_name",
    "make_target",
    "normalize_kernel",
    "renew_defs",
    "vdevice_equal",
]

# The wheel's default LLVM triple (x86_64-conda-linux-gnu) makes LLVM drop ``mcpu=native``;
# naming the plain Linux triple keeps the CPU features we ask for.
HOST_TRIPLE = "x86_64-linux-gnu"


def make_target(spec: dict[str, Any] | str | tvm.target.Target) -> tvm.target.Target:
    """A ``tvm.target.Target`` from the dict form 0.27 requires (a bare kind name works too)."""
    if isinstance(spec, tvm.target.Target):
        return spec
    if isinstance(spec, str):
        spec = {"kind": spec}
    spec = dict(spec)
    host = spec.pop("host", None)
    if host is not None:
        return tvm.target.Target(spec, host=host)
    return tvm.target.Target(spec)


@functools.cache
def host_cpu_name() -> str:
    """The LLVM name of this machine's CPU (``znver3``, ``skylake-avx512``...)."""
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def normalize_kernel(func: PrimFunc) -> tvm.IRModule:
    """A kernel as MetaSchedule keys it in a tuning database (its ``normalize_mod``).

    tvm-hetero's schedule label is dropped, so a kernel keys the same before and after it is
    labelled.
    """
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    from tvm_hetero.ir.attrs import SCHEDULE_ATTR

    return _normalize_mod(func.without_attr(SCHEDULE_ATTR))


def vdevice_equal(a: VDevice | None, b: VDevice | None) -> bool:
    """Compare two VDevices by target kind, device id and scope.

    ``VDevice.same_as`` recurses without end in 0.27.0.post1; ``==`` on targets is structural.
    """
    if a is None or b is None:
        return a is b
    return (
        str(a.target.kind.name) == str(b.target.kind.name)
        and int(a.vdevice_id) == int(b.vdevice_id)
        and str(a.memory_scope) == str(b.memory_scope)
    )
