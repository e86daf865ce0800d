"""The corpus models whose initialisation hid layers from their output, checked again with live
weights (``zoo.live_weights``): import, compile and match ONNX Runtime.

    .venv/bin/python benchmarks/models/live_weights.py [--only NAME ...] [--timeout 900]
    .venv/bin/python benchmarks/models/live_weights.py --timed NAME ... [--rounds 5]

Each model of ``zoo.CORPUS`` is built in PyTorch as its library initialises it and the
parameters ``live_weights`` draws again are listed (a zero batch-norm scale closing a residual
branch, a layer scale of 1e-6, a classifier of zeros...): with those, the branches behind them
added a millionth of their value to the output or nothing, and matching ONNX Runtime within the
corpus' tolerance said nothing of them. Each model with any is then exported with the live
weights (what every corpus run and test now exports) and checked in its own process
(``corpus.check_apart``, no timing). Writes
``benchmarks/results/corpus_live_weights.json``.

``--timed``: each named model exported twice, with the weights as built and live, both
compiled for the whole CPU and both run by ONNX Runtime on the same threads, and ONNX Runtime
on the weights as built with ``session.set_denormal_as_zero`` too, all in ``--rounds``
interleaved rounds (medians): whether the weights change the time, ours or the peer's. One
JSON line per model in ``benchmarks/results/corpus_live_weights_timed.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "cpu_kernels")]
from stamp import stamp  # noqa: E402


def drawn_again(name: str) -> list[str]:
    """The parameters of ``CORPUS[name]``, as built, that ``live_weights`` draws again."""
    import torch
    from zoo import CORPUS, live_weights

    torch.manual_seed(0)
    module, _ = CORPUS[name].build(False)
    return live_weights(module)


def timed(name: str, work: Path, rounds: int) -> dict:
    """Milliseconds (medians of ``rounds`` interleaved rounds) of ``CORPUS[name]`` with its
    weights as built and live: ours and ONNX Runtime's each, and ONNX Runtime's on the weights
    as built with denormals read and written as zero (``ort_zeroed``)."""
    import torch
    from ort_timing import cpu_session, interleaved_ms
    from ort_timing import median_seconds as ort_seconds
    from zoo import CORPUS, _torchscript_export, input_names, live_weights

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.runtime.measure import MeasureConfig

    config = MeasureConfig(repeat=5, min_repeat_ms=100)
    timers = {}
    for kind in ("built", "live"):
        torch.manual_seed(0)
        module, args = CORPUS[name].build(False)
        if kind == "live":
            live_weights(module)
        path = work / f"{name}-{kind}.onnx"
        names = input_names(args)
        _torchscript_export(module, args, path, names)
        feeds = {n: a.numpy() for n, a in zip(names, args, strict=True)}
        compiled = api.compile(load_model(path), [cpu_device(threads=2)])
        timers[f"ours_{kind}"] = lambda c=compiled, f=feeds: api.median_seconds(c, f, config)
        session = cpu_session(path, 2)
        timers[f"ort_{kind}"] = lambda s=session, f=feeds: ort_seconds(s, f, config)
        if kind == "built":
            zeroed = cpu_session(path, 2, entries={"session.set_denormal_as_zero": "1"})
            timers["ort_zeroed"] = lambda s=zeroed, f=feeds: ort_seconds(s, f, config)
    times = interleaved_ms(timers, rounds)
    return {"model": name, "rounds": rounds, **{f"{k}_ms": v for k, v in times.items()}}


def main() -> int:
    from corpus import check_apart
    from zoo import CORPUS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(CORPUS), default=None)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    parser.add_argument("--timed", nargs="+", choices=sorted(CORPUS), default=None)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.timed:
        from onnx_models import append_rows

        with tempfile.TemporaryDirectory() as work:
            for name in args.timed:
                row = {**stamp(), **timed(name, Path(work), args.rounds)}
                append_rows([row], "corpus_live_weights_timed.jsonl")
                print(json.dumps(row), flush=True)
        return 0
    out = RESULTS / "corpus_live_weights.json"
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.only or CORPUS:
            drawn = drawn_again(name)
            if not drawn:
                continue
            row = check_apart(name, Path(work), 2, 0, args.timeout)  # matched, not timed
            row = {**row, "drawn": drawn, **stamp()}
            rows.append(row)
            print(f"{name:>20}: {len(drawn):3d} drawn again, {row['stage']:>6}, relative error "
                  f"{row.get('rel_err', float('nan')):.1e} {row.get('error', '')}", flush=True)  # fmt: skip
    out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
