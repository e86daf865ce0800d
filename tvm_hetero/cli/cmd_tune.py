"""``tvm-hetero tune MODEL --device ... --trials N --tuning-db DIR``."""

from __future__ import annotations

import argparse

from tvm_hetero import api
from tvm_hetero.build.tuning import cpu_kernels, tune
from tvm_hetero.cli.common import (
    console,
    devices_from_args,
    model_from_args,
    progress_bar,
    writable_folder,
)


def run(args: argparse.Namespace) -> int:
    """Tune the model's kernels on its first device: a CPU here (later compiles use the records
    with --cpu-schedule metaschedule), a GPU where it is (:func:`_gpu`)."""
    model = model_from_args(args)
    devices = devices_from_args(args, ["cpu"])
    writable_folder(args.tuning_db, "--tuning-db")  # made only once the rest is known good
    if devices[0].kind == "cuda":
        return _gpu(args, model, devices[0])
    placed = api.place(model, devices[:1], api.Placement((devices[0].name,)))
    kernels = sum(len(k) for k in cpu_kernels(placed).values())
    console().print(f"{model.name}: {kernels} distinct CPU kernels on {devices[0].name}")
    with progress_bar() as bar:
        task = bar.add_task("MetaSchedule trials", total=args.trials)
        summary = tune(
            placed,
            args.tuning_db,
            args.trials,
            lambda done, total: bar.update(task, completed=done),
        )
    console().print(
        f"seeded {summary.seeded} kernels with the CPU rules (the floor), measured "
        f"{summary.trials} candidates in {summary.seconds:.0f} s; records in "
        f"{summary.work_dir}. Use: tvm-hetero compile {args.model} --cpu-schedule metaschedule "
        f"--tuning-db {args.tuning_db}"
    )
    return 0


def _gpu(args: argparse.Namespace, model, gpu) -> int:
    """Write the GPU kernels to tune into ``--tuning-db``; tune them here if the GPU is here,
    else say what to run on the machine that has it."""
    from tvm_hetero.build.gpu_tuning import export_tasks, gpu_tasks, tune_tasks
    from tvm_hetero.devices.spec import SpecError
    from tvm_hetero.runtime.cuda import cuda_device

    tasks = gpu_tasks(api.place(model, [gpu], api.Placement((gpu.name,))))
    path = export_tasks(tasks, args.tuning_db)
    per_task = max(1, args.trials // max(1, len(tasks)))
    console().print(f"{model.name}: {len(tasks)} GPU kernels to tune, written to {path}")
    use = f"tvm-hetero compile {args.model} --device {gpu.name} --tuning-db {args.tuning_db}"
    try:
        cuda_device(gpu.index)
    except SpecError:
        console().print(
            f"{gpu.name} is not here. Where it is, with the full TVM wheel: python -m "
            f"tvm_hetero.build.gpu_tuning {args.tuning_db} --work-dir {args.tuning_db} "
            f"--trials {per_task}; then, back here: {use}"
        )
        return 0
    measured = tune_tasks(args.tuning_db, args.tuning_db, per_task)
    console().print(f"measured {measured} schedules; records in {args.tuning_db}. Use: {use}")
    return 0
