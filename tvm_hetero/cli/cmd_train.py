"""``tvm-hetero train TRACES -o DIR``: FlexPie's XGBoost estimators from traces."""

from __future__ import annotations

import argparse
from pathlib import Path

from tvm_hetero.cli.common import console, table


def run(args: argparse.Namespace) -> int:
    """Fit the compute, sync and rearrange estimators; print their held-out error."""
    from tvm_hetero.costmodel.estimators import FEATURES, train
    from tvm_hetero.strategies.flexpie.traces import read_traces

    for path in args.traces:
        if not Path(path).is_file():
            raise FileNotFoundError(f"traces {path!r}: no such file (tvm-hetero collect-traces -o)")
    found = read_traces(*args.traces)
    missing = sorted(set(FEATURES) - set(found))
    if missing:
        raise ValueError(
            f"traces {args.traces}: no {', '.join(missing)} traces; collect them first"
        )
    rows = []
    for name in FEATURES:
        features, seconds = found[name]
        est = train(name, features, seconds, args.held_out, rounds=args.rounds,
                    notes={"traces": [str(p) for p in args.traces]})  # fmt: skip
        est.save(args.output_dir)
        rules = sorted(est.notes.get("rules", {}).items(), key=lambda kv: int(kv[0]))
        kernels = ", ".join(f"v{v} ({n} lanes)" if v else f"? ({n} lanes)" for n, v in rules)
        rows.append([name, len(seconds), f"{est.held_out_mape * 100:.1f} %", kernels or "-"])
    columns = ["estimator", "traces", "held-out MAPE", "kernels' rules"]
    console().print(table("FlexPie estimators", columns, rows))
    console().print(f"wrote {args.output_dir} (use: --estimators {args.output_dir})")
    return 0
