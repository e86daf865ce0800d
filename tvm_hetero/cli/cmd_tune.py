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
    """Tune the model's CPU kernels; later compiles use them with --cpu-schedule metaschedule."""
    model = model_from_args(args)
    devices = devices_from_args(args, ["cpu"])
    writable_folder(args.tuning_db, "--tuning-db")  # made only once the rest is known good
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
