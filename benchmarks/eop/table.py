"""EOP's Figure 8 (LSTM, GRU, BERT at batch 16) and Table 4 CNNs on the device pair we have (issue 4).

    .venv/bin/python benchmarks/eop/table.py [--models lstm gru bert resnet18 mobilenet]
                                             [--devices cpu cpu:1] [--baseline cpu]
                                             [--out benchmarks/results/eop.json]

For each model: every operator's time on both devices, key-operator sweeps fitted to patterns, the
plans of EOP and its baselines (home device only, the other device only, Equal, Fixed) through one
path, each compiled and measured end to end against the single-device build, with the planner's
own run time and the patterns' held-out errors. For each key operator of the EOP plan, its time
measured inside the planned model (instrumented, unfused: shards, slices, copies and concat) is
compared with the two-device bound ``1 / (1/t_home + 1/t_other) + copies`` (goal: within 15 %).
``--baseline`` names single devices (``cpu``: all cores) compiled and timed in the same interleaved
rounds, so a plan over two core sets (``--devices cpu@0 cpu@1``) is compared with the whole machine.
ONNX Runtime (``onnxruntime`` row; ``pip install -e ".[bench]"``) runs a torch twin of the model
(``benchmarks/torch_twins.py``: same architecture and shapes) with as many threads as the two
devices have cores, in the same rounds. Every time is the median of the rounds' medians.
Writes ``--out`` (``eop.json``) and beside it ``eop_<model>.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tvm_hetero import api
from tvm_hetero.devices.discover import resolve_device
from tvm_hetero.profiling.db import ProfileDB
from tvm_hetero.profiling.profiler import Profiler
from tvm_hetero.runtime.measure import MeasureConfig
from tvm_hetero.strategies.eop import planner as eop
from tvm_hetero.viz.splits import plot_split_plan
from tvm_hetero.zoo import load_zoo_model

MODELS = {  # EOP Table 3 workloads at batch 16 (BERT and the CNNs scaled to run on 2 cores)
    "lstm": ("lstm", {}),
    "gru": ("gru", {}),
    "bert": ("bert-small", dict(batch=16, seq_len=32)),
    "resnet18": ("resnet18", dict(image=112)),
    "mobilenet": ("mobilenet", {}),
}
RESULTS = Path("benchmarks/results")
ROUNDS = 3
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ort_timing import interleaved_ms, twin_timer  # noqa: E402
from stamp import stamp  # noqa: E402


def one(name: str, device_names: list[str], db: Path, baselines: list[str], out: Path) -> dict:
    spec, overrides = MODELS[name]
    model = load_zoo_model(spec, **overrides)
    devices = [resolve_device(d) for d in device_names]
    profiler = Profiler(ProfileDB(db), config=MeasureConfig(repeat=5, min_repeat_ms=10))
    start = time.perf_counter()
    inputs = eop.measure_inputs(model, devices, profiler)
    measure_s = time.perf_counter() - start
    x = model.random_inputs()
    reference = api.reference_outputs(model, x, devices[0])
    rows, compiled = {}, {}
    for strategy in eop.STRATEGIES:
        start = time.perf_counter()
        plan = eop.plan(inputs, strategy)
        plan_s = time.perf_counter() - start
        ordered = api.in_plan_order(devices, plan)
        compiled[strategy] = api.compile(model, ordered, plan)
        err = api.max_abs_error(api.run(compiled[strategy], x), reference)
        rows[strategy] = {
            "predicted_ms": plan.predicted_s * 1e3, "max_err": err, "plan_s": plan_s,
            "devices": list(plan.devices),
            "cut": sum(1 for s in plan.splits if 0 < s.shares[1] < s.extent),
        }  # fmt: skip
        if strategy == "eop":
            plot_split_plan(plan, model.name, out.with_name(f"{out.stem}_{name}.png"))
            rows[strategy]["plan"] = plan.to_dict()
    for base in baselines:
        compiled[f"single {base}"] = api.compile(model, [resolve_device(base)])
        rows[f"single {base}"] = {"predicted_ms": float("nan"), "devices": [base], "cut": 0, "plan_s": 0.0,
                                  "max_err": api.max_abs_error(
                                      api.run(compiled[f"single {base}"], x), reference)}  # fmt: skip
    config = MeasureConfig(repeat=7, min_repeat_ms=50)
    timers = {k: lambda c=c: api.median_seconds(c, x, config) for k, c in compiled.items()}
    ort = twin_timer(spec, overrides, devices, config)
    if ort is not None:
        timers["onnxruntime"] = ort
        rows["onnxruntime"] = {"predicted_ms": float("nan"), "devices": ["onnxruntime"], "cut": 0,
                               "plan_s": 0.0, "max_err": float("nan")}  # fmt: skip
    for key, ms in interleaved_ms(timers, ROUNDS).items():
        rows[key]["measured_ms"] = ms
    best = eop.plan(inputs, "eop")
    measured = eop.measured_key_ops(model, devices, best)
    bounds = []
    for k, split in zip(inputs.keys, best.splits, strict=True):
        o = next(o for o in k.options if o.dim == split.dim)
        t0, t1 = o.time[0](o.extent), o.time[1](o.extent)
        bound = 1 / (1 / t0 + 1 / t1) + split.comm_s
        bounds.append({
            "op": k.node_id, "dim": split.dim, "shares": list(split.shares),
            "t_home_ms": t0 * 1e3, "t_other_ms": t1 * 1e3, "bound_ms": bound * 1e3,
            "predicted_ms": split.total_s * 1e3, "measured_ms": measured[k.node_id] * 1e3,
            "measured_over_bound": measured[k.node_id] / bound,
        })  # fmt: skip
    errors = [f["error"] for f in inputs.fits]
    return {
        "model": name, "spec": model.name, "devices": list(inputs.devices),
        "concurrent": inputs.link.concurrent, "measure_s": measure_s,
        "key_ops": len(inputs.keys), "pattern_error_mean": sum(errors) / max(1, len(errors)),
        "patterns": {k: sum(1 for f in inputs.fits if f["kind"] == k)
                     for k in ("linear", "staircase", "constant")},
        "strategies": rows, "key_op_bounds": bounds,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--devices", nargs=2, default=["cpu", "cpu:1"])
    parser.add_argument("--baseline", nargs="*", default=[], help="single devices to time too")
    parser.add_argument("--out", default=str(RESULTS / "eop.json"))
    parser.add_argument("--db", default="benchmarks/results/tuning/eop_profiles.jsonl")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(out.read_text()) if out.exists() else {}
    results.update(stamp())
    for name in args.models:
        row = one(name, args.devices, Path(args.db), args.baseline, out)
        results.setdefault("models", {})[name] = row
        out.write_text(json.dumps(results, indent=1))
        s = row["strategies"]
        print(name, {k: (round(v["predicted_ms"], 3), round(v["measured_ms"], 3)) for k, v in s.items()},
              "pattern error", round(row["pattern_error_mean"], 3), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
