"""MetaSchedule tuning of a module's CPU kernels into a persistent database.

The database is the one ``BuildOptions("metaschedule", work_dir)`` applies: kernels are keyed the
way MetaSchedule keys them (normalized PrimFunc + the kernel's own target, which names the CPU to
LLVM), so every later build for that device reuses the records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tvm

from tvm_hetero._compat import PrimFunc, normalize_kernel
from tvm_hetero.build.multi_device import TIR_PIPELINE, BuildOptions, lower
from tvm_hetero.ir.workloads import workload_key

RECORDS = "database_tuning_record.json"


@dataclass(frozen=True)
class TuneSummary:
    """What a tuning run did."""

    work_dir: str
    kernels: int
    trials: int
    seconds: float
    seeded: int = 0
    """Kernels whose rule schedule was measured into the database first."""


def cpu_kernels(placed: tvm.IRModule) -> dict[str, dict[str, PrimFunc]]:
    """CPU kernels of a placed module after default lowering, deduplicated, grouped by target."""
    groups: dict[str, dict[str, PrimFunc]] = {}
    seen: set[tuple[str, str]] = set()
    for gv, func in lower(placed, BuildOptions("default")).functions_items():
        if not isinstance(func, PrimFunc) or func.attrs["target"].kind.name != "llvm":
            continue
        target = str(func.attrs["target"])
        key = (target, workload_key(normalize_kernel(func)))
        if key in seen:
            continue
        seen.add(key)
        groups.setdefault(target, {})[gv.name_hint] = func
    return groups


def tune(
    placed: tvm.IRModule, work_dir: str | Path, trials: int,
    progress: Callable[[int, int], None] | None = None, builder_timeout_s: float = 120.0,
) -> TuneSummary:  # fmt: skip
    """Tune the CPU kernels of ``placed`` for ``trials`` measured candidates in all.

    Parameters
    ----------
    placed : tvm.IRModule
        A module with vdevices (``api.place``).
    work_dir : str or Path
        MetaSchedule work dir; records accumulate across runs.
    trials : int
        Total candidates to measure (shared across kernels by MetaSchedule's task scheduler).
    progress : callable, optional
        ``progress(records_so_far, trials)``, called about once a second.
    builder_timeout_s : float
        Per-candidate build timeout (MetaSchedule's 30 s default is too short on 2 cores).
    """
    from tvm.s_tir import meta_schedule as ms

    if trials < 1:
        raise ValueError(f"tune: trials must be >= 1, got {trials}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    groups = cpu_kernels(placed)
    start = time.perf_counter()
    seeded = seed_with_rules(groups, work_dir)
    before = _record_count(work_dir)
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(work_dir, before, trials, progress, stop), daemon=True
    )
    watcher.start()
    try:
        per_group = max(1, trials // max(1, len(groups)))
        for target, kernels in groups.items():
            ms.tir_integration.tune_tir(
                tvm.IRModule(kernels), target=tvm.target.Target(target), work_dir=str(work_dir),
                max_trials_global=per_group, num_trials_per_iter=min(64, per_group),
                builder=ms.builder.LocalBuilder(timeout_sec=builder_timeout_s),
            )  # fmt: skip
    finally:
        stop.set()
        watcher.join()
    done = _record_count(work_dir) - before
    if progress:
        progress(done, trials)
    n_kernels = sum(len(k) for k in groups.values())
    return TuneSummary(str(work_dir), n_kernels, done, time.perf_counter() - start, seeded)


def replays(sch, func: PrimFunc) -> bool:
    """Whether ``sch``'s trace replays on ``func``: a record is its trace on the workload, and
    a rule that schedules a function of its own (``schedules.cpu.pieces``) leaves one that
    does not (the build then applies the rule)."""
    from tvm import s_tir

    try:
        sch.trace.apply_to_schedule(s_tir.Schedule(func), remove_postproc=False)
    except Exception:  # any failure to replay: no record
        return False
    return True


def seed_with_rules(groups: dict[str, dict[str, PrimFunc]], work_dir: Path) -> int:
    """Measure each kernel's rule schedule and commit it as a tuning record.

    The rules are then both MetaSchedule's starting point (its evolutionary search starts from
    the best records of the database) and the floor: a build picks the best record, so a tuned
    kernel is never one measured slower than the rules. Kernels already in the database are
    skipped. Returns how many were seeded.
    """
    from tvm.s_tir import meta_schedule as ms

    from tvm_hetero.schedules.apply import first_schedule
    from tvm_hetero.schedules.cpu import cpu_rules

    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    seeded = 0
    for target_text, kernels in groups.items():
        target = tvm.target.Target(target_text)
        for func in kernels.values():
            task = normalize_kernel(func)
            if database.has_workload(task):
                continue
            found = first_schedule(task["main"], target, cpu_rules())
            if found is None or not replays(found[0], task["main"]):
                continue
            sch = found[0]
            seconds = _time_kernel(sch.mod, target)
            database.commit_tuning_record(
                ms.database.TuningRecord(
                    sch.trace, database.commit_workload(task), [seconds], target,
                    ms.arg_info.ArgInfo.from_prim_func(task["main"]),
                )
            )  # fmt: skip
            seeded += 1
    return seeded


def _time_kernel(mod: tvm.IRModule, target: tvm.target.Target) -> float:
    """Median seconds of one compiled kernel on random inputs."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from tvm_hetero.runtime.measure import MeasureConfig, adaptive, random_args

    shapes = [
        ([int(d) for d in a.shape], str(a.dtype)) for a in ArgInfo.from_prim_func(mod["main"])
    ]
    lib = tvm.compile(mod, target, tir_pipeline=TIR_PIPELINE)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in random_args(shapes)]
    timing = adaptive(
        lambda n, r: lib.mod.time_evaluator("main", dev, number=n, repeat=r)(*args),
        MeasureConfig(repeat=5, min_repeat_ms=10),
    )
    return sorted(timing.samples_s)[len(timing.samples_s) // 2]


def _record_count(work_dir: Path) -> int:
    path = work_dir / RECORDS
    if not path.exists():
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.strip())


def _watch(work_dir: Path, before: int, trials: int, progress, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if progress:
            progress(_record_count(work_dir) - before, trials)
