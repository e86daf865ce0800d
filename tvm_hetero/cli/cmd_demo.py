"""``tvm-hetero demo``: census, two-device build, run and check on the default model."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from tvm_hetero import api
from tvm_hetero.cli.cmd_compile import placement_table
from tvm_hetero.cli.cmd_inspect import census_table, summary_line
from tvm_hetero.cli.common import console, devices_from_args, table
from tvm_hetero.devices import gpu_count, resolve_device
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.runtime.device import runtime_device
from tvm_hetero.runtime.executor import Executor

OUT_DIR = Path("out")


def _timed(
    compiled: api.CompiledModel, inputs: dict, repeat: int, plot: str | None = None
) -> tuple[list[np.ndarray], float]:
    """Outputs and median ms on the concurrent runtime; ``plot``: the measured timeline."""
    args = api.ordered_args(compiled.model.inputs, inputs)
    with Executor(compiled.deployment) as executor:
        outputs = executor.run(args)
        median = executor.time(args, repeat).median_ms
    if plot:
        from tvm_hetero.viz.run_timeline import plot_run_timeline

        title = f"{compiled.model.name} on {', '.join(d.name for d in compiled.devices)}"
        console().print(f"measured timeline: {plot_run_timeline(executor.timeline, title, plot)}")
    return outputs, median


def run(args: argparse.Namespace) -> int:
    """The main job; exits 1 if the two builds disagree."""
    out = console()
    model = load_model(args.model)
    pair = ["cpu", "cuda:0"] if gpu_count() else ["cpu@0", "cpu@1"]
    devices = devices_from_args(args, pair)
    for device in devices:  # it runs here: every device must be here, before any work
        runtime_device(device)
    graph = OpGraph.from_module(model.mod)
    out.rule(f"[bold]1. Model {model.name}")
    out.print(census_table(graph, f"Operator census of {model.name}"))
    out.print(summary_line(graph))
    OUT_DIR.mkdir(exist_ok=True)
    from tvm_hetero.viz.census import plot_census

    out.print(
        f"census chart: {plot_census(graph.census(), model.name, OUT_DIR / 'demo_census.png')}"
    )

    out.rule("[bold]2. Devices and placement")
    if not gpu_count() and not args.device:
        out.print(
            "No GPU here: the two devices are CPU workers on their own cores, cpu@0 and cpu@1 "
            "(the single-device build uses both cores)."
        )
    placement = api.placement_from_rules(model, devices, {"matmul": devices[-1].name})
    out.print(placement_table(model, placement))

    out.rule("[bold]3. Build and run")
    inputs = model.random_inputs()
    rows, results = [], {}
    single = [resolve_device("cpu")] if devices[0].cores else devices[:1]
    for label, devs, plan, plot in (
        ("single device", single, None, None),
        ("two devices", devices, placement, str(OUT_DIR / "demo_run.png")),
    ):
        start = time.perf_counter()
        compiled = api.compile(model, devs, plan)
        build_s = time.perf_counter() - start
        results[label], median = _timed(compiled, inputs, args.repeat, plot)
        rows.append([label, ", ".join(d.name for d in devs), build_s, median])
    out.print(
        table(
            "Builds (CPU kernels: tvm-hetero's schedule rules, no tuning)",
            ["build", "devices", "build s", "median ms"],
            rows,
        )
    )

    out.rule("[bold]4. Check")
    ref, got = results["single device"], results["two devices"]
    err = api.max_abs_error(got, ref)
    scale = max(float(np.max(np.abs(r))) for r in ref)
    ok = err <= 1e-4 * scale + 1e-5
    out.print(
        f"max |two-device - single-device| = {err:.3g} (outputs up to {scale:.3g}): "
        + ("[bold green]same numbers[/]" if ok else "[bold red]MISMATCH[/]")
    )
    ok = _eop(model, devices, inputs, ref, args.repeat) and ok
    ok = _duet(devices, args.repeat) and ok
    return 0 if ok else 1


DUET_MODEL = ("siamese-lstm", {"seq_len": 16})
"""Step 6's model: DUET's Siamese network (two towers of 2-layer LSTMs, hidden 128) over 16 steps
instead of the paper's 64, so that planning (a dozen builds) takes about a minute."""


def _duet(devices, repeat: int) -> bool:
    """Step 6: DUET on a multi-branch model: planned, built, checked, timed, its run drawn."""
    from tvm_hetero.cli.duet import plan_and_say, report
    from tvm_hetero.strategies.eop import profiler_for

    out = console()
    name, settings = DUET_MODEL
    model = load_model(name, **settings)
    out.rule(f"[bold]6. DUET: the branches of {model.name} on two devices at once")
    result = plan_and_say(model, devices, profiler_for(OUT_DIR / "profiles.jsonl"), 4)
    report(result, model, devices, 4)
    plan = result.plan
    inputs = model.random_inputs()
    single = [resolve_device("cpu")] if devices[0].cores else devices[:1]
    ref, single_ms = _timed(api.compile(model, single), inputs, repeat)
    ordered = api.in_plan_order(devices, plan)
    plot = str(OUT_DIR / "demo_duet_run.png")
    got, median = _timed(api.compile(model, ordered, plan), inputs, repeat, plot)
    err = api.max_abs_error(got, ref)
    ok = err <= 1e-4 * max(float(np.max(np.abs(r))) for r in ref) + 1e-5
    verdict = "[bold green]same numbers[/]" if ok else "[bold red]MISMATCH[/]"
    out.print(
        f"{plan.strategy} on {', '.join(plan.devices)}: {median:.3f} ms; "
        f"{single[0].name} alone {single_ms:.3f} ms ({single_ms / median:.2f}x); "
        f"max error {err:.2g}: {verdict}; measured run: {plot}"
    )
    return ok


def _eop(model, devices, inputs, ref, repeat: int) -> bool:
    """Step 5: EOP's plan and its baselines, built, checked and timed."""
    from tvm_hetero.cli.eop import split_table
    from tvm_hetero.profiling.db import ProfileDB
    from tvm_hetero.profiling.profiler import Profiler
    from tvm_hetero.runtime.measure import MeasureConfig
    from tvm_hetero.strategies import eop
    from tvm_hetero.viz.splits import plot_split_plan

    out = console()
    out.rule("[bold]5. EOP: key operators cut between the two devices")
    profiler = Profiler(
        ProfileDB(OUT_DIR / "profiles.jsonl"), config=MeasureConfig(repeat=3, min_repeat_ms=5)
    )
    with out.status("profiling key operators and fitting patterns (cached in out/)"):
        measured = eop.measure_inputs(model, devices, profiler, samples=4)
    rows, ok = [], True
    for strategy in ("eop", "equal", "home", "other"):
        plan = eop.plan(measured, strategy)
        if strategy == "eop":
            out.print(split_table(plan))
            out.print(f"plan chart: {plot_split_plan(plan, model.name, OUT_DIR / 'demo_eop.png')}")
        ordered = api.in_plan_order(devices, plan)
        got, median = _timed(api.compile(model, ordered, plan), inputs, repeat)
        err = api.max_abs_error(got, ref)
        ok = ok and err <= 1e-4 * max(float(np.max(np.abs(r))) for r in ref) + 1e-5
        rows.append([strategy, ", ".join(plan.devices), plan.predicted_s * 1e3, median, err])
    cols = ["plan", "devices (home first)", "predicted ms", "median ms", "max error"]
    out.print(table("EOP and its baselines (one path: plan -> passes -> build -> run)", cols, rows))
    return ok
