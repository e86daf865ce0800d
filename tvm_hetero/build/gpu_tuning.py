"""MetaSchedule tuning of a model's GPU kernels, on the machine that has the GPU.

dlight's GPU rules give every kernel a fixed schedule; MetaSchedule searches each kernel's
design space on the GPU itself. Where the model is compiled has no GPU (and the GPU box often
has no compiler), so the work is split like TVM's builder and runner, but by folder:

1. here: :func:`gpu_tasks` cuts the placed model's GPU kernels (fused, before any schedule;
   deduplicated by workload) and :func:`export_tasks` writes them to ``FOLDER/tasks.json``
   (``tvm-hetero tune MODEL --device cuda:0 --tuning-db FOLDER``);
2. on a machine with the GPU and the full TVM wheel: :func:`tune_tasks` measures dlight's
   schedule and random samples of MetaSchedule's design space for every task, built and
   timed there, into a tuning database (``python -m tvm_hetero.build.gpu_tuning FOLDER
   --work-dir DB``, or the same ``tune`` command where the GPU is);
3. here again: ``tvm-hetero compile ... --tuning-db DB``: a GPU kernel the database has a
   record for gets the best one (``tuned``), the others dlight's rules.

Kernels that compute no reduction (element-wise, copies, layout changes) are not exported:
dlight's fallback is already one pass over memory, and their trials are better spent on the
convolutions, matmuls and norms.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm

TASKS = "tasks.json"
FORMAT = 1

BOX_LIMITS = {
    "max_shared_memory_per_block": 49152,
    "max_threads_per_block": 1024,
    "thread_warp_size": 32,
    "registers_per_block": 65536,
}
"""What MetaSchedule's GPU design space asks of a CUDA target that the device's name alone does
not say (the limits of every NVIDIA GPU from Volta on)."""


@dataclass(frozen=True)
class GpuTask:
    """One GPU kernel to tune: its name in the model, workload key, how often a run calls it,
    the kernel normalized as MetaSchedule keys it, and its target."""

    name: str
    key: str
    calls: int
    mod: tvm.IRModule
    target: tvm.target.Target

    def to_dict(self) -> dict:
        """JSON form (the kernel as TVM's JSON)."""
        return {
            "name": self.name, "key": self.key, "calls": self.calls,
            "target": str(self.target), "mod": tvm.ir.save_json(self.mod),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> GpuTask:
        """Inverse of :meth:`to_dict`."""
        return cls(
            data["name"], data["key"], int(data["calls"]), tvm.ir.load_json(data["mod"]),
            tvm.target.Target(data["target"]),
        )  # fmt: skip


def gpu_tasks(placed: tvm.IRModule, options=None) -> list[GpuTask]:
    """The GPU kernels of a placed module worth tuning, most called first.

    ``placed`` is a module with vdevices (``api.place``); it is fused as the build fuses it
    (``options``' fusion), so the tasks are the kernels a build schedules.
    """
    from tvm_hetero._compat import PrimFunc, normalize_kernel
    from tvm_hetero.build.multi_device import fused
    from tvm_hetero.ir.recurrent import RECURRENT_ATTR
    from tvm_hetero.ir.workloads import workload_key

    mod = fused(placed, options)
    calls = _call_counts(mod)
    found: dict[str, GpuTask] = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, PrimFunc) or RECURRENT_ATTR in func.attrs:
            continue
        target = func.attrs.get("target")
        if target is None or target.kind.name != "cuda" or not reduces(func):
            continue
        task_mod = normalize_kernel(func)
        key = workload_key(task_mod)
        before = found.get(key)
        count = calls.get(gv.name_hint, 1) + (before.calls if before else 0)
        found[key] = GpuTask(gv.name_hint, key, count, task_mod, with_limits(target))
    return sorted(found.values(), key=lambda t: -t.calls)


def with_limits(target: tvm.target.Target) -> tvm.target.Target:
    """``target`` with :data:`BOX_LIMITS` where it does not set them."""
    config = dict(target.export())
    for name, value in BOX_LIMITS.items():
        config.setdefault(name, value)
    return tvm.target.Target(config)


def reduces(func) -> bool:
    """Whether a kernel has a block that reduces (a sum, a max): what tuning can speed up."""
    from tvm import tirx
    from tvm.s_tir import Schedule

    sch = Schedule(tvm.IRModule({"main": func}))
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    return any(v.iter_type == tirx.IterVar.CommReduce for b in blocks for v in sch.get(b).iter_vars)


def _call_counts(mod: tvm.IRModule) -> dict[str, int]:
    """How many call sites each kernel has in the module's Relax functions."""
    from tvm import relax

    counts: dict[str, int] = {}

    def visit(expr) -> None:
        if (
            isinstance(expr, relax.Call)
            and expr.args
            and isinstance(expr.args[0], tvm.ir.GlobalVar)
        ):
            name = expr.args[0].name_hint
            counts[name] = counts.get(name, 0) + 1

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func.body, visit)
    return counts


def export_tasks(tasks: Sequence[GpuTask], folder: str | Path) -> Path:
    """Write (or add to) ``FOLDER/tasks.json``; a task already there keeps its entry and adds
    its calls. Returns the file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / TASKS
    known = {t.key: t for t in load_tasks(folder)} if path.is_file() else {}
    for task in tasks:
        before = known.get(task.key)
        known[task.key] = task if before is None else GpuTask(
            before.name, before.key, before.calls + task.calls, before.mod, before.target
        )  # fmt: skip
    data = {"format": FORMAT, "tasks": [t.to_dict() for t in known.values()]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
    return path


def load_tasks(folder: str | Path) -> list[GpuTask]:
    """The tasks of ``FOLDER/tasks.json``."""
    path = Path(folder) / TASKS
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: format {data.get('format')!r}, this reads {FORMAT}")
    return [GpuTask.from_dict(t) for t in data["tasks"]]


def tune_tasks(
    folder: str | Path, work_dir: str | Path, per_task: int, builders: int = 8,
    tasks: slice = slice(None), seconds: float | None = None,
) -> int:  # fmt: skip
    """Tune the tasks of ``folder`` (``tasks``: which, in the file's order) on this machine's
    GPU into the database at ``work_dir``; returns the records measured.

    Each kernel gets its dlight schedule and ``per_task`` samples of MetaSchedule's design
    space (its CUDA rules: multi-level tiling with shared-memory staging, cross-thread
    reductions, unrolling; every decision drawn at random, each candidate checked by its
    postprocessors); all are built by ``builders`` processes started once (MetaSchedule's own
    builder starts a pool per batch, and each worker spends half a minute or more importing
    TVM's tensor intrinsics: on a lent H200 box its tuning measured nothing in 270 s), which
    never touch the GPU, and timed on GPU 0 by MetaSchedule's runner (10 runs a sample, 3
    samples). A build keeps the fastest record of each kernel, dlight's included, so a tuned
    kernel is never one measured slower than dlight. Tasks are sampled, built and timed in
    the file's order, a batch at a time, and records are committed as they are measured: with
    ``seconds``, no new batch starts after that long.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tvm.s_tir import meta_schedule as ms

    start = time.perf_counter()
    chosen = load_tasks(folder)[tasks]
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    runner = ms.runner.LocalRunner(
        timeout_sec=120,
        evaluator_config=ms.runner.EvaluatorConfig(number=10, repeat=3, min_repeat_ms=2),
    )
    context = multiprocessing.get_context("spawn")  # a fork would inherit CUDA's state
    measured = 0
    with ProcessPoolExecutor(builders, context, _builder_setup) as pool:
        list(pool.map(_warm, range(builders)))  # every worker started and set up once
        for task in chosen:
            if seconds is not None and time.perf_counter() - start > seconds:
                print(f"gpu_tuning: {seconds:.0f} s spent; {task.name} and after left", flush=True)
                break
            schedules = [s for s in [_dlight(task)] if s is not None] + _samples(task, per_task)
            measured += _measure(task, schedules, pool, runner, database)
            print(
                f"gpu_tuning: {task.name}: {len(schedules)} schedules, best "
                f"{_best_us(database, task):.1f} us ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    return measured


def _builder_setup() -> None:
    """A build worker never touches a GPU (it compiles with nvcc for the target's arch) and
    imports what every build imports once."""
    import os

    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    import tvm.s_tir.tensor_intrin  # noqa: F401
    from tvm.s_tir.meta_schedule.builder import local_builder  # noqa: F401


def _warm(_: int) -> int:
    return 0


def _dlight(task: GpuTask):
    """dlight's schedule of the task, where its trace replays on the kernel."""
    from tvm_hetero.build.tuning import replays
    from tvm_hetero.schedules.apply import GPU_RULES, first_schedule

    found = first_schedule(task.mod["main"], task.target, GPU_RULES)
    if found is None or not replays(found[0], task.mod["main"]):
        return None
    return found[0]


def _samples(task: GpuTask, count: int) -> list:
    """``count`` random schedules of MetaSchedule's design space for the task (fewer where
    sampling fails), postprocessed."""
    from tvm.s_tir import meta_schedule as ms

    context = ms.TuneContext(
        task.mod, target=task.target, space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(), task_name=task.name,
    )  # fmt: skip
    spaces = context.generate_design_space()
    context.pre_tuning(
        max_trials=count, num_trials_per_iter=count, design_spaces=spaces,
        database=None, cost_model=None,
    )  # fmt: skip
    candidates = context.generate_measure_candidates() or []
    context.post_tuning()
    return [c.sch for c in candidates]


def _build(mod_json: str, target_json: str) -> str:
    """Build one scheduled kernel (in a worker); the exported artifact's path."""
    from tvm.s_tir.meta_schedule.builder.local_builder import default_build, default_export

    mod = tvm.ir.load_json(mod_json)
    target = tvm.target.Target(target_json)
    with target:  # nvcc takes the arch from the current target, not from a device
        return default_export(default_build(mod, target, None))


def _measure(task: GpuTask, schedules: list, pool, runner, database) -> int:
    """Build ``schedules`` in ``pool``, time them by ``runner`` and commit each measured one."""
    from tvm.s_tir import meta_schedule as ms

    target_json = str(task.target)
    futures = [pool.submit(_build, tvm.ir.save_json(s.mod), target_json) for s in schedules]
    args = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
    built, inputs, errors = [], [], []
    for sch, future in zip(schedules, futures, strict=True):
        try:
            path = future.result(timeout=180)
        except Exception as err:  # a candidate that does not build is left out
            errors.append(f"build: {_last_line(err)}")
            continue
        built.append(sch)
        device = "cpu" if task.target.kind.name == "llvm" else task.target.kind.name
        inputs.append(ms.runner.RunnerInput(path, device, args))
    workload = database.commit_workload(task.mod)
    committed = 0
    for sch, result in zip(built, runner.run(inputs), strict=True):
        outcome = result.result()
        if outcome.error_msg is not None or not outcome.run_secs:
            errors.append(f"run: {_last_line(outcome.error_msg)}")
            continue
        seconds = [float(x) for x in outcome.run_secs]
        database.commit_tuning_record(
            ms.database.TuningRecord(sch.trace, workload, seconds, task.target, args)
        )
        committed += 1
    if errors:
        print(f"gpu_tuning: {task.name}: {len(errors)} failed, first: {errors[0]}", flush=True)
    return committed


def _last_line(err: object) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(err).__name__


def _best_us(database, task: GpuTask) -> float:
    best = database.get_top_k(database.commit_workload(task.mod), 1)
    if not best:
        return float("nan")
    secs = [float(x) for x in best[0].run_secs]
    return sum(secs) / len(secs) * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tvm_hetero.build.gpu_tuning FOLDER --work-dir DB [--trials N]``."""
    parser = argparse.ArgumentParser(
        prog="python -m tvm_hetero.build.gpu_tuning",
        description="Tune the GPU kernels of an exported folder on this machine's GPU.",
    )
    parser.add_argument("folder", help="a folder written by tvm-hetero tune --export-tasks")
    parser.add_argument("--work-dir", required=True, help="MetaSchedule database folder")
    parser.add_argument("--trials", type=int, default=32, help="samples per kernel")
    parser.add_argument("--builders", type=int, default=8, help="build processes")
    parser.add_argument("--seconds", type=float, default=None, help="no new kernel after")
    parser.add_argument("--first", type=int, default=0, help="the file's tasks from this one")
    parser.add_argument("--count", type=int, default=None, help="this many tasks")
    args = parser.parse_args(argv)
    if not (Path(args.folder) / TASKS).is_file():
        print(f"gpu_tuning: folder {args.folder}: no {TASKS} (export it first)", file=sys.stderr)
        return 2
    if args.trials < 1:
        print(f"gpu_tuning: --trials {args.trials}: give 1 or more", file=sys.stderr)
        return 2
    start = time.perf_counter()
    end = None if args.count is None else args.first + args.count
    records = tune_tasks(
        args.folder, args.work_dir, args.trials, builders=args.builders,
        tasks=slice(args.first, end), seconds=args.seconds,
    )  # fmt: skip
    print(f"gpu_tuning: {records} records in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
