"""The corpus of real architectures against ONNX Runtime (issue 14): import, compile, match, speed.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python benchmarks/models/corpus.py [--only resnet18 gpt2 ...] [--threads 2]

Every model of ``zoo.CORPUS`` (torchvision, timm, transformers ``from_config``, PyTorch models
of the papers' kinds; random weights, no downloads) is exported to ONNX, then, each in its own
process with a time limit: imported by ``tvm-hetero``'s loader, compiled for the CPU with the
default schedule rules (time), run on the export's example inputs and compared with ONNX
Runtime on the same file (relative error: the largest difference over the largest output), and
timed against it with the same threads, back to back (``--rounds`` rounds, each the median of
several runs; the row is the round whose ratio is the median: this machine is shared). A model
that fails is kept with its stage and the error's first line. Writes
``benchmarks/results/models.json`` and ``models.md`` (``--only`` keeps the other rows;
``--out NAME`` writes ``benchmarks/results/NAME.json`` and ``NAME.md`` instead: a host of
another kind, its table beside the first). The rows of ``zoo.ADDED`` go to a table of their
own beside it (``models_added.json``, ``models_added_avx2.json``: :func:`added_name`).
``--only timm:NAME ... --out NAME`` measures timm models outside the corpus the same way, and
``hf:CLASS[:FIELD=VALUE,...]`` transformers model classes from their own config's defaults
with the named fields changed (``zoo.outside``), in a table of their own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
sys.path.insert(0, str(HERE.parent))
from stamp import stamp  # noqa: E402

TOLERANCE = 1e-3
"""Largest relative error that counts as matching ONNX Runtime."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:160]


def median_round(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """The round whose ratio ``ours / theirs`` is the median (the lower of the two middle ones
    for an even count): its two times and its ratio. Medians of each column taken apart can
    come from different rounds and, on a loaded host, disagree with the ratio's."""
    ranked = sorted(zip(ours, theirs, strict=True), key=lambda pair: pair[0] / pair[1])
    o, t = ranked[(len(ranked) - 1) // 2]
    return o, t, o / t


def float64_errors(name: str, small: bool, got: list, expected: list) -> dict[str, float]:
    """Where our outputs and ONNX Runtime's disagree: each one's relative error against the
    model run by torch in float64 (``rel_err_f64``, ``ort_rel_err_f64``), so that a table
    says which of the two is off (``{}`` where the model does not run in float64). ResNetV2-BiT
    from timm: ONNX Runtime's output 2.4e-3 off, ours 7.7e-6 (this Intel Xeon, 2026-12-05)."""
    import numpy as np
    from zoo import float64_outputs

    from tvm_hetero import api

    reference = float64_outputs(name, small)
    shapes = [e.shape for e in expected]
    if reference is None or [r.shape for r in reference] != shapes:
        return {}
    scale = max(float(np.abs(r).max()) for r in reference) or 1.0
    return {"rel_err_f64": api.max_abs_error(got, reference) / scale,
            "ort_rel_err_f64": api.max_abs_error(expected, reference) / scale}  # fmt: skip


def other_feeds(feeds: dict) -> dict:
    """``feeds`` with every input changed as :func:`zoo.other_args` changes a module's: floating
    ones drawn again, token ids rolled by one along their last axis."""
    import torch
    from zoo import other_args

    changed = other_args(tuple(torch.from_numpy(v) for v in feeds.values()))
    return {name: t.numpy() for name, t in zip(feeds, changed, strict=True)}


def follows_input(session, feeds: dict, expected: list, scale: float) -> bool:
    """Whether ONNX Runtime's outputs for another input (:func:`other_feeds`) differ from
    ``expected`` by more than :data:`TOLERANCE` of ``scale``: where they do not, the model's
    output does not depend on its input (a network whose activations vanish through its
    layers at random initialisation, leaving the last layer's bias: ``zoo.follows_input``
    draws such a model's convolutions again before export), and any build would match it."""
    from tvm_hetero import api

    again = session.run(None, other_feeds(feeds))
    return api.max_abs_error(again, expected) > TOLERANCE * scale


def check(name: str, work: Path, threads: int = 2, rounds: int = 3, small: bool = False) -> dict:
    """One model through every stage; the row of the table (``stage`` names the first failure)."""
    import numpy as np

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.runtime.measure import MeasureConfig

    sys.path[:0] = [str(HERE), str(HERE.parent)]
    from ort_timing import cpu_session
    from ort_timing import median_seconds as ort_median_seconds
    from zoo import CORPUS, exported_feeds, onnx_path, outside

    outside(name)

    row: dict = {"model": name, "source": CORPUS[name].source, "stage": "export"}
    path = onnx_path(work, name, "-small" if small else "")
    try:
        given, feeds = exported_feeds(name, path, small)  # a symbolic batch: the example's
        row["stage"] = "import"
        start = time.perf_counter()
        model = load_model(path, shapes=given)
        row["import_s"] = time.perf_counter() - start
        feeds = {s.name: feeds[s.name] for s in model.inputs}  # inputs the export kept
        row["stage"] = "compile"
        start = time.perf_counter()
        compiled = api.compile(model, [cpu_device(threads=threads)])
        row["compile_s"] = time.perf_counter() - start
        row["stage"] = "run"
        got = api.run(compiled, feeds)
        session = cpu_session(path, threads)
        expected = session.run(None, feeds)
        spreads = [float(np.ptp(e)) for e in expected if e.size > 1]  # a score alone: no say
        if spreads and not any(spreads):
            row["stage"] = "reference"  # a dead model: any build of it would match
            row["error"] = "ONNX Runtime's output is one value throughout: matching it says nothing"
            return row
        scale = max(float(np.abs(e).max()) for e in expected) or 1.0
        if scale < np.finfo(np.float32).tiny:  # transformers' MobileViT segmenter: 5.6e-43
            row["stage"] = "reference"  # subnormal: flushed or rounded as each runtime likes
            row["error"] = "ONNX Runtime's output is below float32's normal range throughout"
            return row
        if not follows_input(session, feeds, expected, scale):
            row["stage"] = "reference"  # S3D at its default initialisation: the bias alone
            row["error"] = ("ONNX Runtime's output is the same for another input: matching it "
                            "says nothing")  # fmt: skip
            return row
        row["rel_err"] = api.max_abs_error(got, expected) / scale
        if row["rel_err"] > TOLERANCE:
            row.update(float64_errors(name, small, got, expected))
        matched = min(row["rel_err"], row.get("rel_err_f64", np.inf)) <= TOLERANCE
        row["stage"] = "time" if matched else "match"
        if row["stage"] == "match" or not rounds:
            return row
        config = MeasureConfig(repeat=5, min_repeat_ms=100)
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(api.median_seconds(compiled, feeds, config))
            theirs.append(ort_median_seconds(session, feeds, config))
        row["tvm_rounds_ms"] = [s * 1e3 for s in ours]
        row["ort_rounds_ms"] = [s * 1e3 for s in theirs]
        row["tvm_ms"], row["ort_ms"], row["ratio"] = median_round(row["tvm_rounds_ms"],
                                                                 row["ort_rounds_ms"])  # fmt: skip
        row["stage"] = "ok"
    except Exception as err:
        row["error"] = _first_line(err)
    return row


COLUMNS = (("import_s", ".1f"), ("compile_s", ".1f"), ("rel_err", ".1e"), ("tvm_ms", ".2f"),
           ("ort_ms", ".2f"), ("ratio", ".2f"))  # fmt: skip


def table(rows: list[dict]) -> str:
    """The Markdown table and its summary."""
    lines = [
        "| model | source | result | import s | compile s | rel. error | tvm-hetero ms | ORT ms | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        failed = r.get("error") or f"error {r.get('rel_err', 0):.1e}"
        result = {"ok": "ok", "time": "matches (not timed)"}.get(
            r["stage"], f"fails at {r['stage']}: {failed}"
        )
        if "ort_rel_err_f64" in r:
            result += (f" (against float64: ours {r['rel_err_f64']:.1e}, "
                       f"ONNX Runtime {r['ort_rel_err_f64']:.1e})")  # fmt: skip
        cells = [format(r[k], f) if k in r else "" for k, f in COLUMNS]
        lines.append(f"| {r['model']} | {r['source']} | {result} | " + " | ".join(cells) + " |")
    ok = [r for r in rows if r["stage"] == "ok"]
    ratios = sorted(r["ratio"] for r in ok)
    summary = [f"{len(ok)} of {len(rows)} models import, compile and match ONNX Runtime "
               f"(relative error <= {TOLERANCE:g}, or against torch in float64 where the two "
               "differ)."]  # fmt: skip
    if ratios:
        summary.append(f"Ratio to ONNX Runtime: median {statistics.median(ratios):.2f}x, "
                       f"{sum(x <= 2 for x in ratios)} of {len(ratios)} within 2x, worst "
                       f"{max(ok, key=lambda r: r['ratio'])['model']} {ratios[-1]:.2f}x.")  # fmt: skip
        slow = [r["model"] for r in ok if r["compile_s"] > 60]
        summary.append(f"Compile over 60 s: {', '.join(slow) or 'none'}.")
    return "\n".join(lines) + "\n\n" + " ".join(summary) + "\n"


def check_apart(name: str, work: Path, threads: int, rounds: int, timeout: int) -> dict:
    """:func:`check` of ``name`` in a process of its own, given ``timeout`` seconds; a crash or
    a timeout is the row's stage, with the error's last line."""
    from zoo import CORPUS

    cmd = [sys.executable, __file__, "--one", name, "--threads", str(threads),
           "--rounds", str(rounds), "--work", str(work)]  # fmt: skip
    failed = {"model": name, "source": CORPUS[name].source}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**failed, "stage": "timeout", "error": f"over {timeout} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    return {**failed, "stage": "crash",
            "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:160]}  # fmt: skip


def main() -> None:
    sys.path.insert(0, str(HERE))
    from zoo import CORPUS, OUTSIDE_FORMS, outside

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="+", metavar="MODEL", default=None,
                        help=f"corpus models, or {OUTSIDE_FORMS} for one outside it")  # fmt: skip
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    parser.add_argument("--work", default="/tmp/tvm-hetero-corpus", help="ONNX files go here")
    parser.add_argument("--out", default="models", help="results file name, without .json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one model, JSON on stdout
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    unknown = [m for m in map(outside, args.only or []) if m not in CORPUS]
    if unknown:
        parser.error(f"--only: {unknown[0]!r} is not in the corpus nor {OUTSIDE_FORMS}")
    if args.one:
        print(json.dumps(check(args.one, work, args.threads, args.rounds)))
        return
    rows = earlier_rows(args.out)
    meta = {"threads": args.threads, "tolerance": TOLERANCE}
    for name in args.only or list(CORPUS):
        row = check_apart(name, work, args.threads, args.rounds, args.timeout)
        rows[name] = {**row, **stamp()}  # rows of earlier runs keep their own
        print(f"{name:>20}: {row['stage']:>8} {row.get('ratio', 0):5.2f}x "
              f"compile {row.get('compile_s', 0):6.1f} s {row.get('error', '')}", flush=True)  # fmt: skip
        for out, ordered in tables(args.out, rows).items():
            if ordered:
                path = RESULTS / f"{out}.json"
                path.write_text(json.dumps({**meta, "rows": ordered}, indent=1) + "\n")
                (RESULTS / f"{out}.md").write_text(table(ordered))
    print(table([rows[n] for n in CORPUS if n in rows]))


def earlier_rows(out: str) -> dict[str, dict]:
    """The rows of table ``out`` and of its added models' (:func:`added_name`), by model; each
    model outside the corpus among them joins it (``zoo.outside``), so that a run of other
    models keeps its row."""
    from zoo import outside

    rows: dict[str, dict] = {}
    for path in (RESULTS / f"{name}.json" for name in (out, added_name(out))):
        if path.exists():
            rows.update({r["model"]: r for r in json.loads(path.read_text())["rows"]})
    for name in rows:
        outside(name)
    return rows


def tables(out: str, rows: dict[str, dict]) -> dict[str, list[dict]]:
    """Table ``out``'s rows and its added models' (:func:`added_name`), each in the corpus's
    order, from ``rows`` (by model)."""
    from zoo import ADDED, CORPUS

    names = {out: [n for n in CORPUS if n not in ADDED], added_name(out): list(ADDED)}
    return {o: [rows[n] for n in members if n in rows] for o, members in names.items()}


def added_name(out: str) -> str:
    """The results file (no ``.json``) of :data:`zoo.ADDED`'s rows beside the table ``out``:
    ``models`` -> ``models_added``, ``models_avx2`` -> ``models_added_avx2``. The models that
    joined the corpus later keep a table of their own, measured in the same run."""
    head, found, tail = out.partition("models")
    return f"{head}models_added{tail}" if found else f"{out}_added"


if __name__ == "__main__":
    main()
