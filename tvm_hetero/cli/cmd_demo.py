"""``tvm-hetero demo``: the main job on this machine's devices. Each default model is written as
an ONNX file (as a user brings one), ``optimize`` weighs every strategy and each device alone
against ONNX Runtime in the same rounds, and the kept build is checked against one device."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tvm_hetero import api
from tvm_hetero.cli.cmd_optimize import default_devices, shown
from tvm_hetero.cli.common import console, devices_from_args
from tvm_hetero.frontends import load_model

OUT_DIR = Path("out")

DEFAULT_MODELS = ("siamese-lstm", "bert-small")
"""DUET's Siamese LSTM (two towers that can run at once: spreading can pay on two cores) and a
small BERT encoder (one chain of wide matmuls: one device wins on two cores)."""

DEMO_SETTINGS = {"samples": 3, "key_share": 0.5, "correction_runs": 4}
"""Fewer sizes swept per EOP dimension, fewer key operators and fewer DUET corrections than the
defaults, so the demo takes minutes on two cores (the Siamese LSTM's 1300 operators: EOP's
default sweep alone took over five)."""


def _source(name: str) -> tuple[str, str | None]:
    """The model to load and its ONNX file: the zoo model written as ONNX by PyTorch when that
    can be done here, else the zoo model itself (no ONNX Runtime line then)."""
    from tvm_hetero.zoo.onnx_files import ONNX_MODELS, write_onnx

    if name not in ONNX_MODELS:
        return name, None
    try:
        path = str(write_onnx(name, OUT_DIR / f"{name}.onnx"))
    except ImportError:  # no PyTorch: the zoo's own build of it
        return name, None
    return path, path


def _one(name: str, devices, args: argparse.Namespace) -> bool:
    """Optimize one model, print what was found, write it, check its numbers."""
    out = console()
    source, onnx = _source(name)
    model = load_model(source, name=name)
    out.rule(f"[bold]{model.name}" + (f" (from {onnx})" if onnx else ""))
    settings = {"db": str(OUT_DIR / "profiles.jsonl"), **DEMO_SETTINGS}
    result = shown(model, devices, budget_s=args.budget * 60, onnx=onnx, runs=args.runs, **settings)
    from tvm_hetero.optimize.report import markdown, plot

    stem = OUT_DIR / name
    (stem.with_suffix(".md")).write_text(markdown(result, [d.name for d in devices]))
    chart = plot(result, stem.with_suffix(".png"))
    saved = result.compiled.save(stem.with_suffix(".tar"))
    inputs = model.random_inputs()
    got = api.run(result.compiled, inputs)
    ref = api.reference_outputs(model, inputs, devices[0])
    err = api.max_abs_error(got, ref)
    ok = err <= 1e-4 * max(float(np.max(np.abs(r))) for r in ref) + 1e-5
    same = "[green]same numbers[/]" if ok else "[bold red]MISMATCH[/]"
    out.print(f"kept build vs one device: max error {err:.2g}, {same}; wrote {saved}, {chart}")
    return ok


def run(args: argparse.Namespace) -> int:
    """The main job on each model; exits 1 if a kept build's numbers differ from one device."""
    names = args.model or list(DEFAULT_MODELS)
    for name in names:  # a name that is not a model: refused before any work
        if name not in DEFAULT_MODELS:
            load_model(name)
    devices = devices_from_args(args, default_devices())
    from tvm_hetero.runtime.device import runtime_device

    for device in devices:  # it runs here: every device must be here, before any work
        runtime_device(device)
    OUT_DIR.mkdir(exist_ok=True)
    console().print(
        f"devices: {', '.join(d.name for d in devices)} (this machine's; a GPU when it has one, "
        "else two halves of its cores)"
    )
    ok = True
    for name in names:
        ok = _one(name, devices, args) and ok
    return 0 if ok else 1
