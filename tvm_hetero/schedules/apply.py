"""Schedule every kernel of a lowered module and record which schedule each one got."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

import tvm
from tvm.s_tir import Schedule

from tvm_hetero._compat import PrimFunc, dlight, normalize_kernel
from tvm_hetero.ir.attrs import SCHEDULE_ATTR
from tvm_hetero.ir.recurrent import RECURRENT_ATTR, retarget
from tvm_hetero.schedules.cpu import cpu_rules

LOG = logging.getLogger(__name__)


class ScheduleSource(StrEnum):
    """Where a kernel's schedule came from."""

    TUNED = "tuned"
    RULE = "rule"
    DLIGHT = "dlight"
    DEFAULT = "default"


@dataclass(frozen=True)
class KernelChoice:
    """The schedule one kernel got: ``source`` and, for rules, the rule's name."""

    kernel: str
    target: str
    source: ScheduleSource
    rule: str = ""

    @property
    def label(self) -> str:
        """``tuned``, ``rule:matmul``, ``dlight:gpu``, ``default``."""
        return f"{self.source}:{self.rule}" if self.rule else str(self.source)


GPU_RULES = (
    dlight.gpu.Matmul(),
    dlight.gpu.GEMV(),
    dlight.gpu.Reduction(),
    dlight.gpu.GeneralReduction(),
    dlight.gpu.Fallback(),
)


def schedule_kernels(
    mod: tvm.IRModule, cpu: str = "rules", database: object | None = None,
    gpu_database: object | None = None,
) -> tvm.IRModule:  # fmt: skip
    """Schedule the kernels of ``mod`` (each carries its ``target``), returning a new module.

    Parameters
    ----------
    mod : tvm.IRModule
        Legalized, fused module whose PrimFuncs carry a ``target`` attribute.
    cpu : str
        ``rules`` (our CPU rules), ``dlight`` (dlight's CPU rules) or ``default`` (plain loops).
    database : tvm.s_tir.meta_schedule.database.Database, optional
        Tuned records; a CPU kernel with a record uses it, the others use ``cpu``.
    gpu_database : tvm.s_tir.meta_schedule.database.Database, optional
        Tuned records of GPU kernels (:mod:`tvm_hetero.build.gpu_tuning`).

    Notes
    -----
    GPU kernels get their tuned record, else dlight's GPU rules; a recurrent loop kernel
    (:mod:`tvm_hetero.ir.recurrent`) is written again for its device. Each kernel records
    its choice in the ``tvm_hetero.schedule`` attribute; :func:`kernel_choices` reads them
    back.
    """
    out = mod.clone()
    for gv, func in mod.functions_items():
        if not isinstance(func, PrimFunc) or func.attrs.get("tirx.is_scheduled", False):
            continue
        target = func.attrs.get("target")
        if target is None:
            continue
        if RECURRENT_ATTR in func.attrs:  # a loop kernel, written for its device
            out[gv] = retarget(func, target).with_attr(SCHEDULE_ATTR, "rule:recurrent")
            continue
        records = gpu_database if target.kind.name == "cuda" else database
        scheduled, label = _schedule_one(func, target, cpu, records)
        out[gv] = scheduled.with_attr(SCHEDULE_ATTR, label)
    return out


def kernel_choices(mod: tvm.IRModule) -> list[KernelChoice]:
    """The schedule of each kernel of a module built by :func:`schedule_kernels`."""
    choices = []
    for gv, func in mod.functions_items():
        if not isinstance(func, PrimFunc) or SCHEDULE_ATTR not in func.attrs:
            continue
        source, _, rule = str(func.attrs[SCHEDULE_ATTR]).partition(":")
        target = _describe(func.attrs["target"])
        choices.append(KernelChoice(gv.name_hint, target, ScheduleSource(source), rule))
    return sorted(choices, key=lambda c: c.kernel)


def _describe(target) -> str:
    """``llvm znver3 x2`` (CPU name, cores), ``cuda sm_90``."""
    attrs = target.attrs
    if target.kind.name == "llvm":
        cores = attrs.get("num-cores")
        return " ".join(
            str(p) for p in ("llvm", attrs.get("mcpu", ""), f"x{cores}" if cores else "") if p
        )
    return " ".join(str(p) for p in (target.kind.name, attrs.get("arch", "")) if p)


def _schedule_one(func: PrimFunc, target, cpu: str, database) -> tuple[PrimFunc, str]:
    if target.kind.name != "llvm":
        tuned = _tuned(func, target, database) if database is not None else None
        if tuned is not None:
            return tuned, str(ScheduleSource.TUNED)
        scheduled = _first_rule(func, target, GPU_RULES)
        if scheduled is None:
            return func, str(ScheduleSource.DEFAULT)
        return scheduled[0], f"{ScheduleSource.DLIGHT}:gpu"
    if database is not None:
        tuned = _tuned(func, target, database)
        if tuned is not None:
            return tuned, str(ScheduleSource.TUNED)
    if cpu == "default":
        return func, str(ScheduleSource.DEFAULT)
    rules = cpu_rules() if cpu == "rules" else (dlight.cpu.GEMV(), dlight.cpu.Reduction())
    scheduled = _first_rule(func, target, rules)
    if scheduled is None:
        return func, str(ScheduleSource.DEFAULT)
    source = ScheduleSource.RULE if cpu == "rules" else ScheduleSource.DLIGHT
    return scheduled[0], f"{source}:{scheduled[1]}"


def first_schedule(func: PrimFunc, target, rules) -> tuple[Schedule, str] | None:
    """The schedule of the first of ``rules`` that applies to ``func``, and that rule's name.

    A rule that raises on a kernel it did not foresee is skipped with a warning (the next rule,
    else TVM's default schedule, takes the kernel): one kernel never sinks a build.
    """
    with target:
        for rule in rules:
            name = getattr(rule, "name", type(rule).__name__.lower())
            try:
                sch = rule.apply(func, target, False)
            except Exception as err:  # any rule failure falls back
                kernel = func.attrs.get("global_symbol", "kernel") if func.attrs else "kernel"
                LOG.warning(
                    "%s: schedule rule %s failed (%s); falling back", kernel, name, _why(err)
                )
                continue
            if isinstance(sch, list):
                sch = sch[0] if sch else None
            if sch is not None:
                return sch, name
    return None


def _why(err: Exception) -> str:
    """The last line of a TVM error (its message), else the exception's type."""
    lines = str(err).strip().splitlines()
    return lines[-1] if lines else type(err).__name__


def _first_rule(func: PrimFunc, target, rules) -> tuple[PrimFunc, str] | None:
    found = first_schedule(func, target, rules)
    if found is None:
        return None
    sch, name = found
    return sch.mod["main"].with_attr("tirx.is_scheduled", True), name


def _tuned(func: PrimFunc, target, database) -> PrimFunc | None:
    """The best schedule ``database`` holds for ``func`` on ``target``, with ``func``'s attrs."""
    sch = database.query_schedule(normalize_kernel(func), target, "main")
    if sch is None:
        return None
    # keep the kernel's own attrs: it must not become a public "main"
    tuned = sch.mod["main"].without_attr("global_symbol").with_attrs(dict(func.attrs))
    return tuned.with_attr("tirx.is_scheduled", True)
