"""EdgePipe's planner time against the paper's Table 2, and as devices grow to 64.

Layers are ViT-Base's (and ViT-Large's) as ``pipeline_layers`` cuts them (the paper-size zoo
models; nothing is compiled). Layer costs are *not measured* here: each layer's FLOPs at each
device kind's rate (the planner's time depends on the sizes, not on the values). Device kinds
follow the paper's Table 4 (RCC-VE at 100 / 75 / 25 % CPU, MinnowBoard; 8 / 4 / 4 / 2 GB;
1 Gbit/s, 100 / 50 / 20 Mbit/s links through a switch: a link's rate is the slower NIC's).

    .venv/bin/python benchmarks/edgepipe/planner_time.py [--out benchmarks/results/edgepipe_planner.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from tvm_hetero.frontends import load_model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan.edgepipe import PipelineProblem, categories, edgepipe
from tvm_hetero.strategies.edgepipe.planner import pipeline_layers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stamp import stamp

GFLOPS = {"rcc-100": 8.0, "rcc-75": 6.0, "rcc-25": 2.0, "minnow": 5.0}  # per device kind
MEMORY = {"rcc-100": 8 * 2**30, "rcc-75": 4 * 2**30, "rcc-25": 4 * 2**30, "minnow": 2 * 2**30}
NIC_MBPS = {"rcc-100": 1000.0, "rcc-75": 100.0, "rcc-25": 50.0, "minnow": 20.0}


def problem(
    model: str, counts: dict[str, int], memory: dict[str, int] | None = None
) -> PipelineProblem:
    graph = OpGraph.from_module(load_model(model).mod)
    layers = pipeline_layers(graph)
    flops = [sum(graph.node(n).flops or 0 for n in ops) for ops in layers.ops]
    kinds = [k for k, n in counts.items() for _ in range(n)]
    rate = [min(NIC_MBPS[a], NIC_MBPS[b]) * 1e6 / 8 for a in kinds for b in kinds]
    n = len(kinds)
    return PipelineProblem(
        tuple(tuple(f / (GFLOPS[k] * 1e9) for f in flops) for k in kinds),
        layers.out_bytes, layers.in_bytes, layers.weight_bytes, layers.work_bytes,
        tuple((memory or MEMORY)[k] for k in kinds),
        tuple(tuple(math.inf if a == b else rate[a * n + b] for b in range(n)) for a in range(n)),
    )  # fmt: skip


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> list[dict]:
    """Time the DP on each case, print a table and return its rows."""
    cases = [
        ("vit-base", {"rcc-100": 3, "rcc-25": 3, "minnow": 3}),
        ("vit-base", {k: 4 for k in GFLOPS}),
        ("vit-base", {k: 8 for k in GFLOPS}),
        ("vit-base", {k: 16 for k in GFLOPS}),
        ("vit-large", {k: 16 for k in GFLOPS}),
    ]
    print(f"{'model':<10} {'devices':>7} {'kinds':>5} {'layers':>6} {'DP s':>8} "
          f"{'naive DP s':>10} {'stages':>6} {'period ms':>9}")  # fmt: skip
    rows = []
    for model, counts in cases:
        p = problem(model, counts)
        seconds, part = timed(lambda p=p: edgepipe(p))
        n = p.n_devices
        naive_s = timed(lambda p=p: edgepipe(p, group=False), 1)[0] if n <= 12 else None
        naive = f"{naive_s:10.3f}" if naive_s is not None else " " * 9 + "-"
        print(f"{model:<10} {n:>7} {len(categories(p)):>5} {p.n_layers:>6} {seconds:8.4f} "
              f"{naive} {len(part.stages):>6} {part.period_s * 1e3:9.1f}")  # fmt: skip
        rows.append({
            "model": model, "devices": n, "kinds": len(categories(p)), "layers": p.n_layers,
            "dp_best_of_5_s": seconds, "naive_dp_s": naive_s, "stages": len(part.stages),
            "period_ms": part.period_s * 1e3,
        })  # fmt: skip
    return rows


def memory_caps() -> None:
    """ViT-Large and ViT-Huge on 8 devices of 1 GiB each (half a MinnowBoard): no device holds
    either model, EdgePipe splits it so every stage fits; GPipe's even split over all 8 and
    PipeDream's partitioner, on one device order, for comparison (predicted, FLOPs-based)."""
    from tvm_hetero.plan.edgepipe import evaluate, gpipe, pipedream

    caps = {k: 2**30 for k in GFLOPS}
    print(f"\n{'model':<10} {'weights GiB':>11} {'alone':>6} {'EdgePipe':>22} "
          f"{'GPipe x8':>10} {'PipeDream x8':>12}")  # fmt: skip
    for model in ("vit-large", "vit-huge"):
        p = problem(model, {"rcc-100": 2, "rcc-75": 2, "rcc-25": 2, "minnow": 2}, caps)
        last = p.n_layers - 1
        alone = ["OOM" if not evaluate(p, [(0, last, d)]).feasible else "fits"
                 for d in range(p.n_devices)]  # fmt: skip
        part = edgepipe(p)
        order = list(range(p.n_devices))
        base = [gpipe(p, order).period_s, pipedream(p, order).period_s]
        peak = max(s.memory_bytes for s in part.stages) / 2**30
        print(
            f"{model:<10} {sum(p.weight_bytes) / 2**30:11.2f} {alone[0]:>6} "
            f"{len(part.stages):>2} stages {part.period_s * 1e3:7.0f} ms {peak:4.2f} GiB "
            + " ".join(f"{'OOM' if math.isinf(b) else f'{b * 1e3:.0f} ms':>11}" for b in base)
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="EdgePipe's planner time")
    parser.add_argument("--out", type=Path, help="write the rows here (JSON)")
    args = parser.parse_args()
    rows = main()
    memory_caps()
    if args.out:
        args.out.write_text(json.dumps({**stamp(), "rows": rows}, indent=1) + "\n")
