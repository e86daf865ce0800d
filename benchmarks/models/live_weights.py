"""The corpus models whose initialisation hid layers from their output, checked again with live
weights (``zoo.live_weights``): import, compile and match ONNX Runtime.

    .venv/bin/python benchmarks/models/live_weights.py [--only NAME ...] [--timeout 900]

Each model of ``zoo.CORPUS`` is built in PyTorch as its library initialises it and the
parameters ``live_weights`` draws again are listed (a zero batch-norm scale closing a residual
branch, a layer scale of 1e-6, a classifier of zeros...): with those, the branches behind them
added a millionth of their value to the output or nothing, and matching ONNX Runtime within the
corpus' tolerance said nothing of them. Each model with any is then exported with the live
weights (what every corpus run and test now exports) and checked in its own process
(``corpus.py --one NAME --rounds 0``: no timing). Writes
``benchmarks/results/corpus_live_weights.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
sys.path[:0] = [str(HERE), str(HERE.parent)]
from stamp import stamp  # noqa: E402


def drawn_again(name: str) -> list[str]:
    """The parameters of ``CORPUS[name]``, as built, that ``live_weights`` draws again."""
    import torch
    from zoo import CORPUS, live_weights

    torch.manual_seed(0)
    module, _ = CORPUS[name].build(False)
    return live_weights(module)


def main() -> int:
    from zoo import CORPUS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(CORPUS), default=None)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per model")
    args = parser.parse_args()
    out = RESULTS / "corpus_live_weights.json"
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.only or CORPUS:
            drawn = drawn_again(name)
            if not drawn:
                continue
            cmd = [sys.executable, str(HERE / "corpus.py"), "--one", name, "--rounds", "0",
                   "--work", work]  # fmt: skip
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                row = json.loads(lines[-1]) if lines else {"stage": "crash", "error": (
                    done.stderr.strip().splitlines() or ["no output"])[-1][:160]}  # fmt: skip
            except subprocess.TimeoutExpired:
                row = {"stage": "timeout", "error": f"over {args.timeout} s"}
            row = {**row, "model": name, "drawn": drawn, **stamp()}
            rows.append(row)
            print(f"{name:>20}: {len(drawn):3d} drawn again, {row['stage']:>6}, relative error "
                  f"{row.get('rel_err', float('nan')):.1e} {row.get('error', '')}", flush=True)  # fmt: skip
    out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
