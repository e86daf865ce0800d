"""EOP's table on the GPU box, step 3 of 3: predicted beside measured, per model and strategy.

Reads ``predicted.json`` (``eop_plans.py``) and the box's ``latency_b.jsonl`` (``on_box.sh b``),
prints the table (CPU only = ``home`` when the CPU is home, ...) and writes it as JSON; a plan
also timed with every unit handed to its worker's thread (``latency.py --hand-over-too``) has
that time beside it::

    .venv/bin/python benchmarks/gpu/eop_table.py .gpu/b/predicted.json OUT/latency_b.jsonl \\
        --out benchmarks/results/gpu_eop.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predicted", type=Path)
    parser.add_argument("measured", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    predicted = json.loads(args.predicted.read_text())
    measured, handed = {}, {}
    for line in args.measured.read_text().splitlines():
        row = json.loads(line)
        (measured if row.get("on_spot", True) else handed)[row["artifact"]] = row
    rows = []
    for artifact, p in predicted.items():
        m = measured.get(artifact, {})
        ms = m.get("p50_ms")
        error = None if ms is None else 100 * (p["predicted_ms"] - ms) / ms
        over = handed.get(artifact, {}).get("p50_ms")
        rows.append({**p, "measured_ms": ms, "error_pct": error, "devices": m.get("devices"),
                     "handed_over_ms": over})  # fmt: skip
    print(f"{'model':11} {'strategy':8} {'home':7} {'pred ms':>9} {'meas ms':>9} {'err %':>7} "
          f"{'handed over':>11}")  # fmt: skip
    for r in rows:
        meas = "-" if r["measured_ms"] is None else f"{r['measured_ms']:9.4f}"
        err = "-" if r["error_pct"] is None else f"{r['error_pct']:7.1f}"
        over = "-" if r["handed_over_ms"] is None else f"{r['handed_over_ms']:11.4f}"
        print(f"{r['model']:11} {r['strategy']:8} {r['home']:7} {r['predicted_ms']:9.4f} "
              f"{meas:>9} {err:>7} {over:>11}")  # fmt: skip
    for model in sorted({r["model"] for r in rows}):
        mine = {r["strategy"]: r["measured_ms"] for r in rows if r["model"] == model}
        if all(v is not None for v in mine.values()):
            best = min((v, k) for k, v in mine.items() if k != "eop")
            print(f"{model}: EOP {mine['eop']:.4f} ms, best baseline {best[1]} {best[0]:.4f} ms "
                  f"({best[0] / mine['eop']:.2f}x)")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
