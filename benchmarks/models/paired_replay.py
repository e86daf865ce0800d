"""A change measured inside whole models by replaying both builds' kernels in the model's order,
one run of each in turn, beside ONNX Runtime's whole run in the same turns (issue 56).

    .venv/bin/python benchmarks/models/paired_replay.py MODEL [MODEL ...]
        --off MODULE:NAME=EXPR [--off ...] [--only REGEX] [--runs 200] [--threads 2]

``before_and_now.py`` times whole runs of the two builds in rounds of a second or so each; on
a shared host whose neighbours change its speed by a tenth to a fifth from one second to the
next, that floor hides most single changes. Here each build's kernel calls are recorded once
(``kernels_inside.recorded_calls``: the VM's own tensors, so a call reads what the one before
wrote, where it wrote it) and replayed in the model's order, the two builds and ONNX Runtime's
whole run one after the other in every turn (the order changing from turn to turn), so a slow
spell falls on all three, and each turn gives one ratio. ``--off`` turns the change off for the
``before`` build (as ``before_and_now.py``'s); ``--only`` sums the calls whose kernel name the
regular expression finds as well (the kernels the change touches: both builds must have as
many). Prints, per model, the medians of the replays (whole, and the calls ``--only`` picks)
and of ONNX Runtime's runs, with the median and quartiles of the per-turn ratios now / before;
one JSON line per model in ``benchmarks/results/paired_replay.jsonl``. A replay sums the
kernels without the VM between them (the VM adds nothing measurable on two threads:
``kernels_inside.py``); ``now / ORT`` sets the replay of the build with the change against
ONNX Runtime's whole run.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "cpu_kernels")]
from before_and_now import refuse_unknown, switch  # noqa: E402
from onnx_models import append_rows  # noqa: E402
from stamp import stamp  # noqa: E402

WARM_TURNS = 5
"""Turns run before the timed ones."""


def replay_us(calls: list, only: re.Pattern | None) -> tuple[float, float]:
    """One replay of ``calls`` in order: microseconds in all, and in the calls ``only`` finds."""
    total = picked = 0.0
    for kernel, func, args in calls:
        start = time.perf_counter()
        func(*args)
        took = time.perf_counter() - start
        total += took
        if only is not None and only.search(kernel):
            picked += took
    return total * 1e6, picked * 1e6


def paired_turns(before: list, now: list, ort_run, runs: int, only) -> dict[str, list]:
    """``runs`` turns, each a replay of ``before`` and ``now`` and one ``ort_run()``, in an
    order that changes from turn to turn: each one's samples by name."""
    samples: dict[str, list] = {"before": [], "now": [], "ort": []}
    steps = {
        "before": lambda: replay_us(before, only),
        "now": lambda: replay_us(now, only),
        "ort": lambda: (ort_run(), 0.0),
    }
    orders = (("before", "now", "ort"), ("now", "ort", "before"), ("ort", "before", "now"))
    for turn in range(WARM_TURNS + runs):
        for name in orders[turn % len(orders)]:
            took = steps[name]()
            if turn >= WARM_TURNS:
                samples[name].append(took)
    return samples


def summary(samples: dict[str, list]) -> dict:
    """Medians of the samples and of the per-turn ratios now / before (with quartiles)."""
    whole = [n[0] / b[0] for b, n in zip(samples["before"], samples["now"], strict=True)]
    row = {
        "before_us": statistics.median(s[0] for s in samples["before"]),
        "now_us": statistics.median(s[0] for s in samples["now"]),
        "ort_us": statistics.median(s[0] for s in samples["ort"]),
        "now_over_before": statistics.median(whole),
        "quartiles": [round(q, 4) for q in statistics.quantiles(whole, n=4)[::2]],
    }
    if samples["before"][0][1]:
        picked = [n[1] / b[1] for b, n in zip(samples["before"], samples["now"], strict=True)]
        row["only_before_us"] = statistics.median(s[1] for s in samples["before"])
        row["only_now_us"] = statistics.median(s[1] for s in samples["now"])
        row["only_now_over_before"] = statistics.median(picked)
    row["now_over_ort"] = row["now_us"] / row["ort_us"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", metavar="MODEL")
    parser.add_argument("--off", action="append", required=True, metavar="MODULE:NAME=EXPR")
    parser.add_argument("--only", metavar="REGEX", help="kernels to sum apart too")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from kernels_inside import compiled_export, recorded_calls
    from ort_timing import cpu_session
    from zoo import exported_feeds, onnx_path

    refuse_unknown(parser, args.models, args.off)
    if args.runs < 4:
        parser.error(f"--runs: {args.runs} is too few; at least 4 (turns) are needed")
    try:
        only = re.compile(args.only) if args.only else None
    except re.error as error:
        parser.error(str(error))
    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            path = onnx_path(tmp, name)
            given, example = exported_feeds(name, path)  # one export, built both ways
            feeds, now = compiled_export(path, given, example, args.threads)
            with ExitStack() as stack:
                for spec in args.off:
                    stack.enter_context(switch(spec))
                before = compiled_export(path, given, example, args.threads)[1]
            calls = {k: recorded_calls(c, feeds)[2] for k, c in (("before", before), ("now", now))}
            if only is not None:
                counts = {k: sum(bool(only.search(c[0])) for c in v) for k, v in calls.items()}
                if counts["before"] != counts["now"] or not counts["now"]:
                    parser.error(f"--only: {args.only!r} finds {counts['before']} calls before "
                                 f"and {counts['now']} now; it must find as many, at least one")  # fmt: skip
            session = cpu_session(path, args.threads)

            def ort_run(session=session, feeds=feeds) -> float:
                start = time.perf_counter()
                session.run(None, feeds)
                return (time.perf_counter() - start) * 1e6

            row = {**stamp(), "model": name, "off": args.off, "only": args.only,
                   "threads": args.threads, "runs": args.runs,
                   **summary(paired_turns(calls["before"], calls["now"], ort_run, args.runs,
                                          only))}  # fmt: skip
        append_rows([row], "paired_replay.jsonl")
        picked = (f"; --only {row['only_before_us']:.0f} -> {row['only_now_us']:.0f} us "
                  f"({row['only_now_over_before']:.3f})" if "only_now_us" in row else "")  # fmt: skip
        print(f"{name}: before {row['before_us']:.0f} us, now {row['now_us']:.0f} us, now / before "
              f"{row['now_over_before']:.3f} (quartiles {row['quartiles'][0]:.3f}-"
              f"{row['quartiles'][1]:.3f}){picked}; ORT {row['ort_us']:.0f} us, now / ORT "
              f"{row['now_over_ort']:.2f}x", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
