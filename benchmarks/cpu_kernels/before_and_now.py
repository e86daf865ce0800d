"""One ONNX file built with a change and without it, both run beside ONNX Runtime in the same
interleaved rounds: the row a before / now benchmark records."""

from __future__ import annotations

import argparse
import contextlib
import importlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np


def before_and_now(
    path: Path, x: np.ndarray, without: AbstractContextManager, runs: int
) -> dict[str, float]:
    """Milliseconds (medians) of ``path`` compiled for the whole CPU as it is (``now``) and
    inside ``without`` (``before``: the change turned off), and of ONNX Runtime on the same
    cores and threads, all three on input ``x``, in interleaved rounds; the larger error of the
    two against ONNX Runtime's output, and the threads."""
    import onnxruntime as ort

    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.optimize.peer import OnnxRuntimePeer
    from tvm_hetero.runtime.executor import interleaved_run_seconds
    from tvm_hetero.runtime.onnx_session import session_options

    device = resolve_device("cpu")
    now = api.compile(load_model(str(path)), [device])
    with without:
        before = api.compile(load_model(str(path)), [device])
    (want,) = ort.InferenceSession(str(path), session_options()).run(None, {"x": x})
    errors = [float(np.abs(api.run(c, {"x": x})[0] - want).max()) for c in (before, now)]
    peer = OnnxRuntimePeer(path, device, [x])
    old, new, theirs = interleaved_run_seconds(
        [before.deployment, now.deployment], [runs, runs], peers=[peer], feeds={"x": x}
    )
    return {"threads": device.threads, "before_ms": 1e3 * float(np.median(old)),
            "now_ms": 1e3 * float(np.median(new)), "ort_ms": 1e3 * float(np.median(theirs)),
            "max_abs_error": max(errors)}  # fmt: skip


def patched(off: tuple | list[tuple]) -> AbstractContextManager:
    """``patch.object`` of ``off`` (the object, attribute and value), or of each of a list of
    them, entered together when the result is."""
    from unittest.mock import patch

    @contextlib.contextmanager
    def every() -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for one in off if isinstance(off, list) else [off]:
                stack.enter_context(patch.object(*one))
            yield

    return every()


def record_cases(cases: dict, export, off: tuple | list[tuple], runs: int, results: str) -> None:
    """Each of ``cases`` (``{name: case}``) exported by ``export(case, path)`` (its input),
    measured by :func:`before_and_now` with the change off (``off``: the object, attribute and
    value ``patch.object`` sets for the ``before`` build, or a list of them), printed and
    appended, stamped, to ``benchmarks/results/<results>``."""
    import tempfile

    from onnx_models import append_rows
    from stamp import stamp

    rows = []
    width = max(map(len, cases))
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases.items():
            path = Path(tmp) / f"{len(rows)}.onnx"
            x = export(case, path)
            row = {**stamp(), "case": name, **before_and_now(path, x, patched(off), runs)}
            rows.append(row)
            print(f"{name:{width}} before {row['before_ms']:7.3f} ms  now {row['now_ms']:7.3f} ms"
                  f"  ORT {row['ort_ms']:7.3f} ms  now / ORT {row['now_ms'] / row['ort_ms']:5.2f}x"
                  f"  err {row['max_abs_error']:.1e}")  # fmt: skip
    append_rows(rows, results)


def case_command(
    doc: str, cases: dict, export, off: Callable[[], tuple | list[tuple]], results: str
) -> int:  # fmt: skip
    """A before / now benchmark's command line (``--runs``, ``--only CASE ...``; ``doc``'s first
    paragraph as its description): the chosen ``cases`` measured by :func:`record_cases` with
    the change off as ``off()`` returns it (the object, attribute and value to patch)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", nargs="+", choices=sorted(cases), metavar="CASE")
    args = parser.parse_args()
    chosen = {name: case for name, case in cases.items() if not args.only or name in args.only}
    record_cases(chosen, export, off(), args.runs, results)
    return 0


def module_case_command(
    doc: str, cases: dict, make: Callable[..., tuple], off: Callable[[], tuple], results: str
) -> int:  # fmt: skip
    """:func:`case_command` for cases that are torch modules over one input: ``make(*case)``
    returns the module's builder and the input's shape (``onnx_models.export_case``)."""
    from onnx_models import export_case

    def export(case, path: Path) -> np.ndarray:
        build, shape = make(*case)
        return export_case(build, shape, path)

    return case_command(doc, cases, export, off, results)


def conv_relu_case_command(
    doc: str, cases: dict, conv: Callable[..., Any], shape: Callable[..., tuple],
    off: Callable[[], tuple], results: str,
) -> int:  # fmt: skip
    """:func:`module_case_command` for cases that are a torch convolution with ReLU after it:
    ``conv(*case)`` makes the convolution, ``shape(*case)`` is its input's shape."""
    import torch

    def make(*case) -> tuple:
        return (lambda: torch.nn.Sequential(conv(*case), torch.nn.ReLU())), shape(*case)

    return module_case_command(doc, cases, make, off, results)


def square_conv_case_command(doc: str, cases: dict, off: Callable[[], tuple], results: str) -> int:
    """:func:`conv_relu_case_command` for cases ``(input channels, output channels, window,
    padding, map side)``: a convolution of stride 1 over a square map, batch 1."""
    import torch

    def conv(cin: int, cout: int, window: tuple, padding: tuple, side: int):
        return torch.nn.Conv2d(cin, cout, window, 1, padding)

    def shape(cin: int, cout: int, window: tuple, padding: tuple, side: int) -> tuple:
        return (1, cin, side, side)

    return conv_relu_case_command(doc, cases, conv, shape, off, results)


def convolution_case_command(
    doc: str, cases: dict, switch: tuple[str, object], results: str
) -> int:  # fmt: skip
    """:func:`case_command` for convolutions: each case ``(input channels, output channels,
    window, stride, map side)`` a convolution with ReLU after it
    (``onnx_models.export_convolution``), built without the change by setting the convolution
    rule's ``switch`` (its name and value in ``tvm_hetero.schedules.cpu.conv``; a callable
    value is called with the module)."""
    from onnx_models import export_convolution

    def export(case, path: Path) -> np.ndarray:
        return export_convolution(path, *case)

    return case_command(doc, cases, export, conv_switch(*switch), results)


def module_switch(module: str, name: str, value: object) -> Callable[[], tuple]:
    """The ``off`` of :func:`case_command` that sets ``name`` in the package module ``module``
    (imported when called) to ``value`` (a callable value is called with the module)."""

    def off() -> tuple:
        found = importlib.import_module(module)
        return (found, name, value(found) if callable(value) else value)

    return off


def conv_switch(name: str, value: object) -> Callable[[], tuple]:
    """:func:`module_switch` for the convolution rule (``tvm_hetero.schedules.cpu.conv``)."""
    return module_switch("tvm_hetero.schedules.cpu.conv", name, value)


def linear_case_command(
    doc: str, cases: list[tuple[int, int, int]], off: Callable[[], tuple], results: str
) -> int:  # fmt: skip
    """:func:`case_command` for matmuls: each ``(M, K, N)`` of ``cases`` a ``Linear(K, N,
    bias=False)`` over ``(1, M, K)``, named ``MxK @ KxN``."""
    import torch
    from onnx_models import export_case

    def export(case: tuple[int, int, int], path: Path) -> np.ndarray:
        m, k, n = case
        return export_case(lambda: torch.nn.Linear(k, n, bias=False), (1, m, k), path)

    named = {f"{m}x{k} @ {k}x{n}": (m, k, n) for m, k, n in cases}
    return case_command(doc, named, export, off, results)
