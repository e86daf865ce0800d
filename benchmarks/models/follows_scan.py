"""Which tabled models give one output whatever their input at the draw their row was
measured with (the library's draw, then ``zoo.live_weights``: ``Entry.live``): torch alone,
no export.

    .venv/bin/python benchmarks/models/follows_scan.py [--table models_outside] [--only NAME ...]

A row whose model does not follow its input (``zoo.follows_input``) matched ONNX Runtime
without saying anything; ``corpus.py`` now refuses such rows and the zoo draws such models
again (``zoo.he_init``, ``zoo.unit_norms``), so rows measured before those checks are the ones
to find. Prints each model's verdict, and for one that does not follow whether the zoo's draw
(``zoo.seeded``, what ``corpus.py`` measures now) does, and the rows measured before
2026-12-06 (the check's day) among them: those to measure again. Writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

CHECKED = "2026-12-06"
"""The day ``corpus.py`` began to refuse rows whose model does not follow its input."""


def main() -> int:
    import torch
    import zoo

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default="models_outside")
    parser.add_argument("--only", nargs="+", metavar="NAME")
    args = parser.parse_args()
    rows = json.loads((HERE.parent / "results" / f"{args.table}.json").read_text())["rows"]
    names = [
        r["model"] for r in rows if r.get("ratio") and (not args.only or r["model"] in args.only)
    ]
    dates = {r["model"]: r["date"] for r in rows}
    stale = []
    for name in names:
        key = zoo.outside(name)
        torch.manual_seed(0)
        module, inputs = zoo.CORPUS[key].live(False)
        if zoo.follows_input(module, inputs):
            print(f"{name}: follows", flush=True)
            continue
        drawn, _ = zoo.seeded(key, False)
        now = "follows" if zoo.follows_input(drawn, inputs) else "does not follow either"
        print(f"{name}: one output whatever the input; the zoo's draw {now}", flush=True)
        if dates[name] < CHECKED or now != "follows":
            stale.append(name)
    print(f"{len(stale)} of {len(names)} rows to measure again: {stale}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
