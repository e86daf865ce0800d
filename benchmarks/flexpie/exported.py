"""FlexPie on models no one here wrote: torchvision, timm and transformers exports, ONNX files.

    .venv/bin/pip install -e ".[bench]"
    .venv/bin/python benchmarks/flexpie/exported.py [--only resnet18 bert ...] [--devices 3]
        [--workers]

Each model of the corpus (``benchmarks/models/zoo.py``: random weights, no downloads) is
exported to ONNX at its small size (64 x 64 images; ViT, DeiT and MobileViT at their own),
loaded, cut into FlexPie's layers and planned with the shipped estimators on ``--devices`` CPU
vdevices of this process; FlexPie's plan and two of its baselines that cut every layer they can,
fused 2-D grid (halos in both directions carried through runs of layers) and fixed OutC (every
layer's channels split, boundaries exchanged), are compiled and run, and each one's outputs
compared with the unpartitioned model's (relative error: the largest difference over the largest
output). Operators no scheme cuts (attention's softmax, a pooled head...) run whole on the home
device. ``resnet18-symbolic`` is ResNet-18 exported with a symbolic batch dimension, loaded with
``--shapes``' Python form. A check of the pass and the planner on what users bring, not of speed
(these devices share this machine's two cores: ``latency.py`` times FlexPie on emulated
clusters). With ``--workers`` each plan runs once more on as many ``tvm-hetero worker``
processes of this machine (runtime only, one thread each), its tiles' pieces pushed worker to
worker, and is compared again (``remote_err``). Results:
``benchmarks/results/flexpie_exported.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
MODELS = ("resnet18", "resnet18-symbolic", "mobilenet_v2", "mobilenet_v3_small",
          "efficientnet_b0", "regnet_y_400mf", "shufflenet_v2", "squeezenet1_1", "densenet121",
          "googlenet", "convnext_tiny", "mobilevit_xs", "deit_tiny", "bert", "gpt2")  # fmt: skip
BASELINES = ("fused-Grid", "fixed-OutC")
TOLERANCE = 1e-4


def _relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    from tvm_hetero import api

    return api.max_abs_error(got, want) / (max(float(np.abs(w).max()) for w in want) or 1.0)


@contextlib.contextmanager
def workers(count: int):
    """``count`` ``tvm-hetero worker`` processes here (the TVM runtime only), as one-thread CPU
    devices ``edge-K``; killed at the end."""
    from bench import start_worker  # benchmarks/cluster

    from tvm_hetero.devices import resolve_device

    ports = [9600 + k for k in range(count)]
    procs = []
    try:
        procs.extend(start_worker(port) for port in ports)
        yield [dataclasses.replace(resolve_device("cpu"), name=f"edge-{k}",
                                   host=f"127.0.0.1:{port}", threads=1)
               for k, port in enumerate(ports)]  # fmt: skip
    finally:
        for p in procs:
            p.kill()
            p.wait()


def check(name: str, work: Path, count: int, remote: list | None = None) -> dict:
    """One model through FlexPie; the row of the table (``stage`` names the first failure);
    with ``remote`` devices, each plan is run on them too."""
    from zoo import CORPUS, load_exported, random_feeds

    from tvm_hetero import api
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.runtime.executor import Executor
    from tvm_hetero.strategies.flexpie import planner as strategy

    source = CORPUS[name.removesuffix("-symbolic")].source
    row: dict = {"model": name, "source": source, "stage": "export"}
    try:
        model, args = load_exported(name, work, row)
        row["stage"] = "plan"
        devices = [cpu_device(k) for k in range(count)]
        start = time.perf_counter()
        result = strategy.plan_with_estimators(model, devices, db=work / "profiles.jsonl")
        cuts = Counter(s for s, (a, b) in zip(result.plan.schemes, result.plan.layers,
                                               strict=True) for _ in range(a, b + 1))  # fmt: skip
        row.update(layers=len(result.geometry), plan_s=time.perf_counter() - start,
                   schemes=dict(cuts), fused=sum(b > a for a, b in result.plan.layers),
                   predicted_s=result.partition.predicted_s)  # fmt: skip
        plans = {"flexpie": result.plan} | {
            n: p for n, p in result.baseline_plans(devices).items() if n in BASELINES
        }
        feeds = random_feeds(model, args, 1)[0]
        want = api.reference_outputs(model, feeds, devices[0])
        row["rel_err"] = {}
        for label, plan in plans.items():
            row["stage"] = f"compile {label}"
            compiled = api.compile(model, api.in_plan_order(devices, plan), plan)
            row["stage"] = f"match {label}"
            row["rel_err"][label] = _relative_error(api.run(compiled, feeds), want)
            if row["rel_err"][label] > TOLERANCE:
                return row
            if remote:
                row["stage"] = f"run {label} on workers"
                named = dict(zip((d.name for d in devices), (e.name for e in remote), strict=True))
                moved = dataclasses.replace(plan, devices=tuple(named[n] for n in plan.devices))
                deployed = api.compile(model, api.in_plan_order(remote, moved), moved)
                with Executor(deployed.deployment, timeout_s=120) as ex:
                    got = ex.run(feeds)
                row.setdefault("remote_err", {})[label] = _relative_error(got, want)
                if row["remote_err"][label] > TOLERANCE:
                    return row
        row["stage"] = "ok"
    except Exception as err:
        text = str(err).strip().splitlines()
        row["error"] = f"{type(err).__name__}: {text[0] if text else ''}"[:160]
    return row


def table(rows: list[dict]) -> str:
    """The Markdown table and its summary line."""
    lines = ["| model | source | result | layers | FlexPie's layers by scheme | fused runs "
             "| rel. error (FlexPie / " + " / ".join(BASELINES) + ") | plan s |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        result = "ok" if r["stage"] == "ok" else f"fails at {r['stage']}: {r.get('error', '')}"
        schemes = ", ".join(f"{s} {n}" for s, n in sorted(r.get("schemes", {}).items()))
        errors = " / ".join(f"{e:.1e}" for e in r.get("rel_err", {}).values())
        plan_s = f"{r['plan_s']:.1f}" if "plan_s" in r else ""
        lines.append(f"| {r['model']} | {r['source']} | {result} | {r.get('layers', '')} | "
                     f"{schemes} | {r.get('fused', '')} | {errors} | {plan_s} |")  # fmt: skip
    ok = sum(r["stage"] == "ok" for r in rows)
    return "\n".join(lines) + f"\n\n{ok} of {len(rows)} models planned, partitioned and matched.\n"


def main() -> None:
    sys.path[:0] = [str(HERE.parent / "models"), str(HERE.parent / "cluster")]
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--devices", type=int, default=3, help="CPU vdevices to tile over")
    parser.add_argument("--workers", action="store_true",
                        help="run each plan on worker processes too (pieces pushed)")  # fmt: skip
    parser.add_argument("--out", default=str(RESULTS / "flexpie_exported.json"))
    args = parser.parse_args()
    out = Path(args.out)
    rows = {r["model"]: r for r in json.loads(out.read_text())} if out.exists() else {}
    on = workers(args.devices) if args.workers else contextlib.nullcontext()
    with tempfile.TemporaryDirectory() as tmp, on as remote:
        for name in args.only:
            rows[name] = r = check(name, Path(tmp), args.devices, remote)
            print(f"{name}: {r['stage']} {r.get('error', '')} {r.get('schemes', '')} "
                  f"{r.get('rel_err', '')} {r.get('remote_err', '')}", flush=True)  # fmt: skip
            ordered = [rows[n] for n in MODELS if n in rows]
            out.write_text(json.dumps(ordered, indent=1) + "\n")  # each model as it ends
    print(table(ordered))


if __name__ == "__main__":
    main()
