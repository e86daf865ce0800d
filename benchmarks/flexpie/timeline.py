"""Where a FlexPie plan's time goes on an emulated cluster: each device's busy and waiting time.

    sudo .venv/bin/python benchmarks/flexpie/timeline.py ps3-50 resnet101 fixed-InH fixed-InW
        [--traces FILE ...] [--db FILE] [--runs 5] [--target generic|host] [--events] [--alone]
        [--compare [--rounds 3] [--ort] [--out benchmarks/results/runtime_programs.jsonl]]

Brings the case's cluster up (as ``latency.py``), plans the model with estimators fitted on
``--traces``, compiles (or loads from ``latency.py``'s kept builds) each named plan (``flexpie``
or a baseline: ``fixed-InH``, ``fused-Grid``, ``single``...) and runs it ``--runs`` times;
prints what the plan was priced (compute, moves and the runtime's measured overheads), its
median latency and, from the executor's timeline of the last run, each device's units and
copies: their span and how long its units waited there for pieces still arriving, and how long
the pieces were in flight (from when the last piece a unit waited for was made to when the unit
had it: ``Timeline.in_flight_s``). With
``--alone`` the plan runs ``--runs`` times more one step at a time, and each unit's time alone
is printed beside its time in the runs together. Alone, a unit's time is the client's around
its call (``Executor(alone=True)``): on a remote worker that is a TVM RPC round trip and the
worker waking under its quota besides the unit (units that compute in hundredths of a
millisecond read half a millisecond to nearly three on the ring of four, Zen 4), while a time
together is the worker's own, less its waits; the ratio is comparable only for units much
longer than that. The estimators price neither: they time tiles over 500 ms, at the quota's
rate.

With ``--compare --ort``, every round also times ONNX Runtime on one device of the cluster
(``ort.py``'s twin of the model, one thread on core 0 held to ``--quota``, ``--runs`` runs),
while the cluster's workers idle; ``--out`` appends the plan's row (priced, the median of each
way over every round, ONNX Runtime's) to a JSON-lines results file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from latency import (
    CASES,
    MODELS,
    SHIPPED_TRACES,
    TARGETS,
    built_once,
    case_cluster,
    fit_estimators,
)
from ort import export, held_run  # puts benchmarks/ on the path: stamp
from stamp import stamp

from tvm_hetero import api
from tvm_hetero.frontends import load_model
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.strategies.flexpie import planner as strategy
from tvm_hetero.strategies.flexpie.report import segment_costs


def unit_times(ex: Executor, tensors, runs: int) -> tuple[list[float], dict]:
    """Seconds of each of ``runs`` runs, and each unit's time on its worker less what it
    waited there for inputs, per run, by ``(worker, step)``."""
    ex.run_tensors(tensors)
    seconds, units = [], {}
    for _ in range(runs):
        start = time.perf_counter()
        ex.run_tensors(tensors)
        seconds.append(time.perf_counter() - start)
        for e in ex.timeline.events:
            if e.kind == "unit":
                units.setdefault((e.worker, e.step), []).append(e.end_s - e.start_s - e.waited_s)
    return seconds, units


WAYS = (
    ("native programs", {}),
    ("Python programs", {"native": False}),
    ("dataflow", {"programs": False}),
)
"""How ``--compare`` runs a plan: the runtime's default (programs, natively where they can
be), programs in Python, and dataflow."""


def between_steps(timeline_events) -> dict[str, float]:
    """Per worker, the mean time between the end of one of its steps and the start of its next
    (seconds): the runtime's own time between units, waits for inputs being inside them."""
    by_worker: dict[str, list] = {}
    for e in sorted(timeline_events, key=lambda e: e.start_s):
        by_worker.setdefault(e.worker, []).append(e)
    return {
        worker: sum(max(0.0, b.start_s - a.end_s) for a, b in itertools.pairwise(steps))
        / max(1, len(steps) - 1)
        for worker, steps in by_worker.items()
    }


def report(
    label: str, ex: Executor, runs: int, tensors, events: bool = False
) -> tuple[dict, list[float], float]:  # fmt: skip
    """Median latency of ``runs`` runs, then the last run's time per device and kind; returns
    :func:`unit_times`' units, the runs' seconds and the largest of the devices' mean time
    between steps in the last run (:func:`between_steps`)."""
    seconds, units = unit_times(ex, tensors, runs)
    print(f"{label}: median {statistics.median(seconds) * 1e3:.1f} ms")
    totals: dict[tuple[str, str], list[float]] = {}
    for e in ex.timeline.events:
        row = totals.setdefault((e.worker, e.kind), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += e.end_s - e.start_s
        row[2] += e.waited_s
    for (worker, kind), (count, span, waited) in sorted(totals.items()):
        print(f"  {worker:>4} {kind:>5}: {count:4d} events, {span * 1e3:7.1f} ms, "
              f"waited for inputs {waited * 1e3:7.1f} ms")  # fmt: skip
    gaps = between_steps(ex.timeline.events)
    print("  between steps, mean: " + ", ".join(
        f"{worker} {gap * 1e3:.2f} ms" for worker, gap in sorted(gaps.items())))  # fmt: skip
    flights = {step: s for (step, mb), s in ex.timeline.in_flight_s(ex.deployment.steps).items()
               if mb == 0}  # fmt: skip
    if flights:
        late = sorted(flights.values())
        print(f"  pieces in flight (made to taken): median {statistics.median(late) * 1e3:.2f} ms, "
              f"largest {late[-1] * 1e3:.2f} ms over {len(late)} units")  # fmt: skip
    if events:
        for e in sorted(ex.timeline.events, key=lambda e: e.start_s):
            flight = flights.get(e.step) if e.microbatch == 0 else None
            print(f"  {e.start_s * 1e3:7.2f} {e.end_s * 1e3:7.2f} {e.worker:>4} {e.kind:>5} "
                  f"waited {e.waited_s * 1e3:5.2f}  {e.step}"
                  + ("" if flight is None else f"  (in flight {flight * 1e3:.2f})"))  # fmt: skip
    return units, seconds, max(gaps.values(), default=0.0)


def report_alone(label: str, ex: Executor, runs: int, tensors, together: dict) -> None:
    """Each unit's median time run alone (``Executor(alone=True)``) beside its median in the
    runs together, in the order the units ran alone (dependency order)."""
    seconds, alone = unit_times(ex, tensors, runs)
    print(f"{label}, one step at a time: median {statistics.median(seconds) * 1e3:.1f} ms")
    print(f"  {'unit':>16} {'device':>6} {'together ms':>11} {'alone ms':>8} {'ratio':>5}")
    for worker, step in alone:
        a = statistics.median(alone[worker, step]) * 1e3
        t = statistics.median(together.get((worker, step), [float("nan")])) * 1e3
        print(f"  {step:>16} {worker:>6} {t:>11.2f} {a:>8.2f} {t / a:>5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case", choices=list(CASES))
    parser.add_argument("model", choices=list(MODELS))
    parser.add_argument("plans", nargs="+", help="flexpie, or a baseline's name")
    parser.add_argument("--traces", nargs="+", default=SHIPPED_TRACES)
    parser.add_argument("--db", default="benchmarks/results/flexpie_profiles.jsonl")
    parser.add_argument("--builds", default="build/flexpie-latency")
    parser.add_argument("--quota", type=float, default=0.45)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", action="store_true", help="print the last run's events")
    parser.add_argument("--compare", action="store_true",
                        help="run each plan by Python programs (Executor(native=False)) and "
                             "by dataflow (Executor(programs=False)) too, in rounds")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --compare: rounds, each running every way --runs times")  # fmt: skip
    parser.add_argument("--ort", action="store_true",
                        help="with --compare: ONNX Runtime on one device in every round")  # fmt: skip
    parser.add_argument("--out", help="with --compare: append each plan's row to this file")
    parser.add_argument("--alone", action="store_true",
                        help="also run each step alone (Executor(alone=True)): every unit's "
                             "time alone on its device beside its time together")  # fmt: skip
    parser.add_argument(
        "--target",
        choices=TARGETS,
        default="generic",
        help="what the devices' code is built for (as latency.py)",
    )
    parser.add_argument("--unpinned", action="store_true",
                        help="let the client run on any core (latency.py pins it to home's)")  # fmt: skip
    args = parser.parse_args()
    if (args.ort or args.out) and not args.compare:
        parser.error("--ort and --out go with --compare")
    args.stamp = stamp()  # before the client is pinned to home's core: the host's cores
    # killed (SIGTERM), still bring the cluster down: its tag comes from a temporary path
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory() as tmp:
        fit_estimators(args.traces, Path(tmp) / "estimators")
        estimators = strategy.Estimators.load(Path(tmp) / "estimators")
        up = case_cluster(args.case, args.quota, Path(tmp), args.target, not args.unpinned)
        with up as (cluster, devices):
            _report_plans(args, parser, cluster, devices, estimators, Path(tmp))


def _report_plans(args, parser, cluster, devices: list, estimators, folder: Path) -> None:
    """Plan the model, then build, run and report each plan asked for (``folder``: for the
    ONNX Runtime twin's export)."""
    model = load_model(MODELS[args.model][0], **MODELS[args.model][1])
    result = strategy.plan_with_estimators(model, devices, cluster, estimators, args.db)
    plans = {"flexpie": result.plan, **result.baseline_plans(devices)}
    unknown = sorted(set(args.plans) - set(plans))
    if unknown:
        parser.error(f"plans {unknown}: not among {sorted(plans)}")
    twin = export(args.model, folder) if args.ort else None
    for label in args.plans:
        plan = plans[label]
        used = api.in_plan_order(devices, plan)
        built = built_once(model, args.model, used, plan, args.builds)
        print(f"{label}: schemes {' '.join(plan.schemes)}")
        priced = result.partition if label == "flexpie" else result.baselines[label]
        compute = sum(s.compute_s for s in priced.segments)
        print(f"  priced {priced.predicted_s * 1e3:.1f} ms: compute {compute * 1e3:.1f}, "
              f"moves {(priced.predicted_s - compute) * 1e3:.1f} (handoff "
              f"{result.handoff_s * 1e3:.2f} ms a piece, a cut segment "
              f"{segment_costs(result.segment_s)}; tiles priced x{result.compute_scale:.2f}, "
              "the home device alone measured)")  # fmt: skip
        if args.events:
            for s in priced.segments:
                print(
                    f"  layers {s.start:3d}-{s.stop - 1:3d} {s.scheme:>5}: compute "
                    f"{s.compute_s * 1e3:6.2f} ms, move in {s.move_in_s * 1e3:5.2f} ms"
                )
        inputs = model.random_inputs()
        ways = WAYS if args.compare else WAYS[:1]
        seconds: dict[str, list[float]] = {}
        gaps: dict[str, list[float]] = {}
        for _ in range(args.rounds if args.compare else 1):
            for way, how in ways:  # a worker serves one session: each opened in turn
                with Executor(built, timeout_s=300, **how) as ex:
                    together, ran, gap = report(f"{label} ({way})", ex, args.runs,
                                                ex.place_inputs(inputs), args.events)  # fmt: skip
                seconds.setdefault(way, []).extend(ran)
                gaps.setdefault(way, []).append(gap)
            if twin is not None:
                ran = [ms / 1e3 for ms in held_run(twin, args.quota, args.runs)]
                print(f"ONNX Runtime, one device: median {statistics.median(ran) * 1e3:.1f} ms")
                seconds.setdefault("onnxruntime", []).extend(ran)
        if args.compare:
            print(f"{label}, medians over {args.rounds} rounds: " + ", ".join(
                f"{way} {statistics.median(s) * 1e3:.1f} ms" for way, s in seconds.items()))  # fmt: skip
        if args.out:
            append_row(args, label, priced.predicted_s, seconds, gaps["native programs"])
        if args.alone:
            with Executor(built, timeout_s=300, alone=True) as ex:
                report_alone(label, ex, args.runs, ex.place_inputs(inputs), together)


def append_row(
    args: argparse.Namespace, label: str, priced_s: float, seconds: dict, gaps: list[float]
) -> None:
    """``label``'s row in ``args.out``: what it was priced, each way's median (ms) and, by
    native programs, the median over rounds of the largest mean time between a device's
    steps."""
    median_ms = {way: round(statistics.median(s) * 1e3, 2) for way, s in seconds.items()}
    row = {"what": "FlexPie plan by programs vs by dataflow", "model": args.model,
           "plan": label, "case": args.case, **args.stamp, "rounds": args.rounds,
           "runs": args.runs, "priced_ms": round(priced_s * 1e3, 2), "median_ms": median_ms,
           "between_steps_ms": round(statistics.median(gaps) * 1e3, 3)}  # fmt: skip
    if "onnxruntime" in median_ms:
        row["ort_one_device_ms"] = median_ms.pop("onnxruntime")
    with open(args.out, "a") as out:
        out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
