"""Corpus models built with a change and without it, in one process, beside ONNX Runtime: what a
change did to whole models, measured in the same interleaved rounds (issue 56).

    .venv/bin/python benchmarks/models/before_and_now.py MODEL [MODEL ...]
        --off MODULE:NAME=EXPR [--off ...] [--rounds 5] [--threads 2]

``--off`` turns the change off for the ``before`` build by setting ``NAME`` in ``MODULE`` to the
Python expression ``EXPR`` while it compiles (a ``MODEL`` outside the corpus: ``timm:NAME`` or
``hf:CLASS[:FIELD=VALUE,...]``, :func:`zoo.outside`), e.g.
``--off "tvm_hetero.schedules.cpu.reduction:rows_in_vectors=lambda *_: None"`` or
``--off "tvm_hetero.schedules.cpu.conv:NARROWEST_HALVED_LANES=1 << 30"``. Each model is exported
as ``corpus.py`` exports it; both builds and ONNX Runtime are timed by ``api.median_seconds`` /
ONNX Runtime's median in ``--rounds`` interleaved rounds (medians of the rounds). Separate runs
on a loaded host move by more than most changes: compare within a run. One JSON line per model
in ``benchmarks/results/before_and_now.jsonl``.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from unittest.mock import patch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "cpu_kernels")]
from onnx_models import append_rows  # noqa: E402
from stamp import stamp  # noqa: E402


def switch(spec: str):
    """``patch.object`` for one ``MODULE:NAME=EXPR``; ValueError naming what is wrong with it
    (not of that form, no such module, no such name in it, an expression that fails)."""
    target, _, expr = spec.partition("=")
    module, _, name = target.partition(":")
    if not (module and name and expr):
        raise ValueError(f"--off: {spec!r} is not MODULE:NAME=EXPR")
    try:
        found = importlib.import_module(module)
    except ImportError:
        raise ValueError(f"--off: {spec!r}: no module {module!r}") from None
    if not hasattr(found, name):
        raise ValueError(f"--off: {spec!r}: {module} has no {name!r}")
    try:
        value = eval(expr)
    except Exception as error:
        raise ValueError(f"--off: {spec!r}: {expr!r} fails: {error}") from None
    return patch.object(found, name, value)


def refuse_unknown(parser: argparse.ArgumentParser, models: list, offs: list) -> None:
    """``parser.error`` (exit 2, one line) for the first of ``models`` neither in the corpus
    nor of ``zoo.OUTSIDE_FORMS`` (those are added to the corpus), then for the first of
    ``offs`` that :func:`switch` refuses: every argument checked before the first export."""
    from zoo import CORPUS, OUTSIDE_FORMS, outside

    unknown = [m for m in map(outside, models) if m not in CORPUS]
    if unknown:
        parser.error(f"MODEL: {unknown[0]!r} is not in the corpus nor {OUTSIDE_FORMS}")
    try:
        for spec in offs:
            switch(spec)
    except ValueError as error:
        parser.error(str(error))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--off", action="append", required=True, metavar="MODULE:NAME=EXPR")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from ort_timing import cpu_session
    from ort_timing import median_seconds as ort_median_seconds
    from zoo import exported_feeds, onnx_path

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.runtime.measure import MeasureConfig

    refuse_unknown(parser, args.models, args.off)
    device, config = cpu_device(threads=args.threads), MeasureConfig(repeat=5, min_repeat_ms=100)
    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            path = onnx_path(tmp, name)
            given, feeds = exported_feeds(name, path)  # a symbolic batch: the example's
            model = load_model(path, shapes=given)
            feeds = {s.name: feeds[s.name] for s in model.inputs}
            now = api.compile(model, [device])
            with ExitStack() as stack:
                for spec in args.off:
                    stack.enter_context(switch(spec))
                before = api.compile(load_model(path, shapes=given), [device])
            session = cpu_session(path, args.threads)
            times: dict[str, list[float]] = {"before": [], "now": [], "ort": []}
            for _ in range(args.rounds):
                times["before"].append(api.median_seconds(before, feeds, config))
                times["now"].append(api.median_seconds(now, feeds, config))
                times["ort"].append(ort_median_seconds(session, feeds, config))
            ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
            row = {**stamp(), "model": name, "off": args.off, "threads": args.threads,
                   **{f"{k}_ms": v for k, v in ms.items()}}  # fmt: skip
            append_rows([row], "before_and_now.jsonl")  # kept if a later model fails
            print(f"{name}: before {ms['before']:.2f} ms ({ms['before'] / ms['ort']:.2f}x ORT)  "
                  f"now {ms['now']:.2f} ms ({ms['now'] / ms['ort']:.2f}x)  ORT {ms['ort']:.2f} ms",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
