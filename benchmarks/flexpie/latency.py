"""FlexPie against its baselines on emulated edge clusters: latency, score and search time.

    sudo .venv/bin/python benchmarks/flexpie/latency.py [--case ring4-1000 ps4-100 ...]
        [--model mobilenet resnet18] [--target generic|host] [--collect] [--collect-idle]
        [--collect-joins]
        [--estimators DIR] [--rounds 3] [--repeat 3] [--ort]

Each case is a ``tvm-hetero cluster up`` of this machine's two cores: ``N`` identical devices
(FlexPie's testbed is homogeneous: four or three TI C6678 boards), each a runtime-only worker in
its own network namespace held to ``--quota`` cores (its code built for ``--target``:
generic x86-64, or this host's CPU), joined as a **ring** (each device to its
two neighbours; traffic to the far side takes two hops), a **ps** star (every device to the
parameter server, device 0, which is also home) or a **mesh**, every link shaped with ``tbf`` to
the case's rate. The paper's links (SRIO at 5 Gbit/s, 1 Gbit/s and 500 Mbit/s, between DSPs
that run MobileNet in milliseconds) are scaled to these CPU quotas as 1000, 200 and 50 Mbit/s.

Per case and model: FlexPie plans with the estimators (``--estimators``, default the shipped
ones), timed; its plan and every baseline (each fixed scheme, layer-wise, fused per scheme, the
home device alone) are compiled and run on the cluster in ``--rounds`` rounds, each loading
every plan in turn for a warm-up and ``--repeat`` timed runs (the host's speed drifts),
latency the median of each plan's runs (every run kept, per round: ``runs_s``); the score of
each is the best measured latency over its own (the paper's performance score). With
``--ort``, every round also times ONNX Runtime on the model's twin (``ort.py``: one thread, on
core 0 held to ``--quota``, as one device of the cluster), ``--repeat`` runs (``ort_s``). ``--collect``
first appends this cluster's traces (tiles on one device, transfers between every pair, joins) to
``--traces`` (``--limit`` tiles of the ``--trace-sample``
models, MobileNet and ResNet-18, then every tile of the ``--trace-whole`` models: BERT's
matmuls are few among them; ResNet-101's small, wide tiles are beyond the others'): what the
shipped estimators were trained on
(``tvm-hetero train``); ``--retrain`` then plans with estimators fitted on that file, this
cluster's traces included (the protocol a user follows: ``collect-traces``, ``train``,
``plan``; the sync estimator does not carry to a topology and bandwidth it never saw: on a
ring of four at 50 Mbit/s, traced on other clusters only, it priced tiled MobileNet plans 40 %
under their measured time).
Results: ``benchmarks/results/flexpie_latency.json``. Compiled plans are kept in ``--builds``
(keyed by the code's git tree, the model, the devices' targets and the plan) and reused by later
cases: the fixed schemes' plans repeat from cluster to cluster; builds of other code are
deleted at start, the least recently used beyond ``--builds-gb`` after each case.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import ort
from emulated import TARGETS, device_target
from stamp import stamp

from tvm_hetero import api
from tvm_hetero.costmodel.estimators import OP_KINDS, channel_vectorized, train
from tvm_hetero.devices import ClusterSpec
from tvm_hetero.emulation import control
from tvm_hetero.emulation.layout import cluster_tag, plan_layout
from tvm_hetero.frontends import load_model
from tvm_hetero.plan.flexpie import scores
from tvm_hetero.records import cpu_model
from tvm_hetero.runtime.deployment import Deployment
from tvm_hetero.runtime.deployment import load as load_deployment
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.strategies.flexpie import planner as strategy
from tvm_hetero.strategies.flexpie.confirm import confirm_by_measurement
from tvm_hetero.strategies.flexpie.traces import (
    IDLE_MS,
    append_traces,
    collect,
    newest_kernels,
    read_traces,
    sync_traces,
)

MODELS = {  # sizes these quotas run in tenths of a second
    "mobilenet": ("mobilenet", {"image": 224, "width": 1.0}),
    "resnet18": ("resnet18", {"image": 224}),
    "resnet101": ("resnet50", {"image": 64, "stages": [3, 4, 23, 3]}),
    "bert": ("bert-small", {}),
}
SHIPPED_TRACES = [
    "benchmarks/results/flexpie_traces_zen5.jsonl",
    "benchmarks/results/flexpie_traces_zen5_again.jsonl",
    "benchmarks/results/flexpie_traces_zen3.jsonl",
    "benchmarks/results/flexpie_traces_zen3_again.jsonl",
    "benchmarks/results/flexpie_traces_zen3_channels.jsonl",
    "benchmarks/results/flexpie_traces_zen5_joins.jsonl",
    "benchmarks/results/flexpie_traces_zen5_channels.jsonl",
    "benchmarks/results/flexpie_traces_intel.jsonl",
    "benchmarks/results/flexpie_traces_intel_resnet18.jsonl",
    "benchmarks/results/flexpie_traces_intel_resnet101.jsonl",
]
"""The traces the shipped estimators were fitted on (``estimators.py --ship``): three hosts,
AMD Zen 5 (the devices' code for generic x86-64 and for that CPU) and Zen 3 (for that CPU), each
once more for how a label repeats; Zen 3 once more with tiles' weights kept constant; Zen 5's
joins twice more (2026-11-27, code for that CPU: its 16-lane joins had been traced once), and
then its tiles with their weights constant, its joins and the PS of 4's transfers; an Intel Xeon
host (family 6 model 167, 16 lanes, 2026-12-03: the ring of 4 at 1 Gbit/s, code for that CPU,
commit 47673e3, CPU rules v43, stamped on its rows after: the collector did not record them
yet), whose 16-lane tiles and joins replace Zen 5's in the fit (``newest_kernels``), and
every tile of ResNet-18 there once more (``--trace-whole resnet18``, cb0ad63: 873 tiles), and
then every tile of ResNet-101 (``--trace-whole resnet101``, 4690b6c: 825 tiles)."""
BEFORE_CONSTANT_WEIGHTS = set(SHIPPED_TRACES[:4])
"""Trace files measured before tiles kept their weights constant (2026-11-27: before, a tile's
weights were its module's parameters, so the build did not lay them out as it does a
deployment's): their compute rows of matmuls (constant weights are padded and packed in
panels) and of convolutions the rule now vectorizes by channel (rows of 1-5 columns) timed
other kernels and are left out of every fit (:func:`fitting_traces`)."""


def fitting_traces(traces: list[str]) -> dict[str, tuple[list[dict], list[float]]]:
    """``read_traces`` of ``traces``, less the stale rows of :data:`BEFORE_CONSTANT_WEIGHTS`
    and, across the files, the kernels' rows of older rules than the newest traced for their
    lanes (``newest_kernels``)."""
    found = {}
    for path in traces:
        for name, (rows, seconds) in read_traces(path, newest_only=False).items():
            keep = [True] * len(rows)
            if name == "compute" and path in BEFORE_CONSTANT_WEIGHTS and rows:
                matmuls = np.array([r["kind"] == OP_KINDS["matmul"] for r in rows])
                keep = ~(channel_vectorized(rows) | matmuls)
            into = found.setdefault(name, ([], []))
            into[0].extend(r for r, k in zip(rows, keep, strict=True) if k)
            into[1].extend(t for t, k in zip(seconds, keep, strict=True) if k)
    return {name: newest_kernels(*traced) for name, traced in found.items()}


CASES = {
    f"{shape}{n}-{mbps}": (shape, n, mbps)
    for shape, sizes in (("ring", (4, 3)), ("ps", (4, 3, 2))) for n in sizes
    for mbps in (1000, 200, 50)
}  # fmt: skip
"""``ring4-1000``...: a ring or parameter server of ``n`` devices over links of ``mbps``. Four
or three devices share this machine's two cores; ``ps2-*`` (one link) gives each device a core
of its own, as a real cluster's devices have."""


def spec_file(case: str, quota: float, folder: Path, target: str = "generic") -> Path:
    """The cluster spec of a case: devices alternate between the two cores, each built for
    :func:`device_target` ``target``."""
    shape, n, mbps = CASES[case]
    devices = [
        {"name": f"e{k}", "kind": "cpu", "target": device_target(target), "cores": [k % 2],
         "cpu_quota": quota}
        for k in range(n)
    ]  # fmt: skip
    if shape == "ring":
        pairs = [(k, (k + 1) % n) for k in range(n)]
    elif shape == "ps":
        pairs = [(0, k) for k in range(1, n)]
    else:
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    links = [{"a": f"e{a}", "b": f"e{b}", "bandwidth_mbps": mbps} for a, b in pairs]
    path = folder / f"{case}.json"
    topology = {"ps": "parameter-server"}.get(shape, shape)
    path.write_text(json.dumps({"topology": topology, "devices": devices, "links": links}))
    return path


def fit_estimators(traces: list[str], folder: Path) -> None:
    """Write into ``folder`` the estimators fitted on every trace of ``traces``."""
    for name, (rows, seconds) in fitting_traces(traces).items():
        train(name, rows, seconds, notes={"traces": traces}).save(folder)


@contextlib.contextmanager
def on_home_cores(devices: list) -> Iterator[None]:
    """This process on the home device's cores while a case runs: it is the client, which
    dispatches every unit and copy, and a real cluster's client runs on the home board.
    Unpinned, it took CPU from whichever device shared its core at the moment, and every
    segment waited for that device (MobileNet fused in rows on the ring of 4: a middle tile's
    units 37 ms on core 1 against 20 on core 0; pinned to core 0, 19 and 28, and the plan ran
    51 ms against 60). Its compiles and estimators then have one core."""
    before = os.sched_getaffinity(0)
    if devices and devices[0].cores:
        os.sched_setaffinity(0, set(devices[0].cores))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def latency_in_rounds(
    deployments: dict, inputs, rounds: int, runs: int, peers: dict | None = None
) -> dict:
    """Seconds of each timed inference of each deployment, per round: ``rounds`` rounds, each
    loading every deployment in turn for one warm-up and ``runs`` timed runs: this host's speed
    moved 1.7x within a quarter of an hour (one device's MobileNet: 112 ms, then 195 ms), so
    plans timed one after the other were ranked by when they ran as much as by what they are.
    (Not all loaded at once: a ``tvm-hetero worker``, like TVM's RPC server, serves one session
    at a time.) ``peers`` maps more keys to functions that time ``runs`` runs of something else
    (seconds each), called once a round after the deployments."""
    peers = peers or {}
    seconds = {key: [[] for _ in range(rounds)] for key in [*deployments, *peers]}
    for r in range(rounds):
        for key, timed in peers.items():
            seconds[key][r] = timed(runs)
        for key, deployment in deployments.items():
            with Executor(deployment, timeout_s=300) as ex:
                tensors = ex.place_inputs(inputs)
                ex.run_tensors(tensors)
                for _ in range(runs):
                    start = time.perf_counter()
                    ex.run_tensors(tensors)
                    seconds[key][r].append(time.perf_counter() - start)
    return seconds


def median_of(rounds: list[list[float]]) -> float:
    """The median of every run of every round."""
    return statistics.median(t for one in rounds for t in one)


def _commit() -> str:
    """The commit of the code measured (``git describe --always``; not ``--dirty``: this
    script writes its results into the tree), or ``""``."""
    try:
        done = subprocess.run(["git", "describe", "--always"], capture_output=True,
                              text=True, cwd=Path(__file__).parent, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return ""
    return done.stdout.strip()


def _effect(plan) -> tuple:
    """What a plan computes where: segments with runs of Home segments merged (one build and one
    measurement for plans that differ only in how they cut the home device's work)."""
    merged: list[list] = []
    for ops, scheme in zip(plan.segments, plan.schemes, strict=True):
        if merged and scheme == merged[-1][1] == "Home":
            merged[-1][0] += tuple(ops)
        else:
            merged.append([tuple(ops), scheme])
    return tuple((ops, scheme) for ops, scheme in merged)


NOT_COMPILING = ("costmodel/", "profiling/", "cli/", "viz/", "emulation/", "runtime/",
                 "plan/flexpie.py", "strategies/flexpie.py")  # fmt: skip
"""Folders and files of ``tvm_hetero/`` that no build depends on (estimators, traces, the CLI,
plots, emulation, running, FlexPie's planner: the plan itself is in a build's key): a change
there keeps the kept builds (``runtime/deployment.py``, which writes and reads them,
excepted)."""


def _compiling(path: str) -> bool:
    inside = path.removeprefix("tvm_hetero/")
    return inside == "runtime/deployment.py" or not inside.startswith(NOT_COMPILING)


def _code_version() -> str | None:
    """A hash of the files of ``tvm_hetero/`` that compile a plan, at HEAD, or ``None`` when
    one of them has uncommitted changes (or there is no git): what a kept build must have been
    compiled by."""
    root = Path(__file__).resolve().parents[2]
    try:
        changed = subprocess.run(["git", "status", "--porcelain", "tvm_hetero"], cwd=root,
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
        tree = subprocess.run(["git", "ls-tree", "-r", "HEAD", "tvm_hetero"], cwd=root,
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    if any(_compiling(line[3:].split(" -> ")[-1]) for line in changed.splitlines()):
        return None
    files = [line for line in tree.splitlines() if _compiling(line.split("\t", 1)[1])]
    return hashlib.sha256("\n".join(files).encode()).hexdigest()


def _kept_build(model, name: str, devices: list, folder: str, plan) -> Deployment:
    """:func:`built_once` for the devices in ``plan``'s order."""
    return built_once(model, name, api.in_plan_order(devices, plan), plan, folder)


def built_once(model, name: str, devices: list, plan, folder: str) -> Deployment:
    """``plan`` compiled for ``devices``, kept in ``folder`` and loaded from there the next time
    the same model, device targets and plan are asked for by the same code (a fixed scheme's
    plan is often the same on every cluster of ``N`` devices: compiling ResNet-18's plans was
    most of a case's time). The kept build runs on this case's workers (its devices replaced)."""
    version = _code_version()
    if not folder or version is None:
        return api.compile(model, devices, plan).deployment
    what = [version, MODELS[name], [[d.name, d.target] for d in devices], plan.to_dict()]
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]
    path = Path(folder) / version[:16] / f"{name}-{key}.tar"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        api.compile(model, devices, plan).deployment.save(path)
    path.touch()  # used: kept the longest by prune_builds
    libraries = path.with_suffix("")
    libraries.mkdir(exist_ok=True)
    deployment = load_deployment(path, libraries)
    return dataclasses.replace(deployment, devices=tuple(devices))


def prune_builds(folder: str, keep_gb: float = 0.0) -> None:
    """Delete the kept builds of other code versions than this one (no later run can load
    them), every extracted build (a case loads its builds again from their archives) and, with
    ``keep_gb``, the least recently used archives beyond that many GB (a ResNet-101 plan's
    build on 3 devices is 0.65 GB: the weights every tile reads, on every device)."""
    version = _code_version()
    if not folder or version is None or not Path(folder).is_dir():
        return
    for old in Path(folder).iterdir():
        if old.name != version[:16]:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    ours = Path(folder) / version[:16]
    for extracted in (p for p in ours.glob("*") if p.is_dir()):
        shutil.rmtree(extracted)
    if keep_gb:
        used = sorted(ours.glob("*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for archive in used:
            total += archive.stat().st_size
            if total > keep_gb * 2**30:
                archive.unlink()


@contextlib.contextmanager
def case_cluster(
    case: str, quota: float, folder: Path, target: str = "generic", pinned: bool = True
) -> Iterator[tuple]:
    """The case's emulated cluster up (:func:`spec_file`'s spec written into ``folder``) and
    its devices, this process on the home device's cores (unless not ``pinned``:
    :func:`on_home_cores`); brought down after."""
    path = spec_file(case, quota, folder, target)
    spec, tag = ClusterSpec.load(path), cluster_tag(path)
    cluster = control.up(spec, plan_layout(spec, tag))
    try:
        devices = list(cluster.devices)
        with on_home_cores(devices) if pinned else contextlib.nullcontext():
            yield cluster, devices
    finally:
        control.down(tag)


def run_case(case: str, args, folder: Path) -> list[dict]:
    with case_cluster(case, args.quota, folder, args.target) as (cluster, devices):
        return _timed_case(case, args, folder, cluster, devices)


def _timed_case(case: str, args, folder: Path, cluster, devices: list) -> list[dict]:
    """What :func:`run_case` does with the cluster up: collect, plan, build and time."""
    out = []
    if args.collect_idle:
        count = append_traces(args.traces, sync_traces(devices, cluster, args.db, idle_ms=IDLE_MS))
        print(f"  transfers after idle gaps: {count}", flush=True)
    if args.collect_joins:  # one device: no pair, so no transfers
        counts = collect([], devices[:1], args.traces, cluster, 1, args.db)
        print(f"  joins: {counts['rearrange']}", flush=True)
    if args.collect:
        if args.trace_sample:
            zoo = [load_model(MODELS[m][0], **MODELS[m][1]) for m in args.trace_sample]
            counts = collect(zoo, devices, args.traces, cluster, args.limit, args.db)
            print(f"  traces: {counts}", flush=True)
        for name in args.trace_whole if args.limit else ():  # every tile, no joins again
            whole = [load_model(MODELS[name][0], **MODELS[name][1])]
            counts = collect(whole, devices, args.traces, cluster, 10**6, args.db, joins=())
            print(f"  traces of {name}'s tiles: {counts}", flush=True)
    if args.retrain and args.model:  # as a user would: collect on this cluster, then train
        folder = folder / f"estimators-{case}"
        fit_estimators([args.traces], folder)
        args.estimators = str(folder)
    estimators = strategy.Estimators.load(args.estimators) if args.model else None
    for name in args.model:
        model = load_model(MODELS[name][0], **MODELS[name][1])
        start = time.perf_counter()
        result = strategy.plan_with_estimators(model, devices, cluster, estimators, args.db)
        plan_s = time.perf_counter() - start
        plans = {"flexpie": result.plan, **result.baseline_plans(devices)}
        predicted = {"flexpie": result.partition.predicted_s} | {
            n: p.predicted_s for n, p in result.baselines.items()
        }
        confirmed, confirm_s = result, 0.0
        if args.confirm:  # timed apart from the rounds below, which time what it kept
            start = time.perf_counter()
            confirmed = confirm_by_measurement(
                result, model, devices, args.confirm,
                build=functools.partial(_kept_build, model, name, devices, args.builds),
            )  # fmt: skip
            confirm_s = time.perf_counter() - start
            plans["flexpie-confirmed"] = confirmed.plan
            predicted["flexpie-confirmed"] = confirmed.partition.predicted_s
        built = {}
        for plan in plans.values():
            if _effect(plan) not in built:
                used = api.in_plan_order(devices, plan)
                built[_effect(plan)] = built_once(model, name, used, plan, args.builds)
        peers = {}
        if args.ort:  # the twin on one device: core 0, held to a device's quota, one thread
            twin = ort.export(name, folder)
            peers["onnxruntime"] = lambda runs, twin=twin: [
                t / 1e3 for t in ort.held_run(twin, args.quota, runs)
            ]
        timed = latency_in_rounds(built, model.random_inputs(), args.rounds, args.repeat, peers)
        runs_s = {label: timed[_effect(plan)] for label, plan in plans.items()}
        measured = {label: median_of(rounds) for label, rounds in runs_s.items()}
        ort_runs_s = timed.get("onnxruntime")
        for label in plans:
            print(f"  {case} {name} {label:>11}: {measured[label] * 1e3:8.2f} ms "
                  f"(predicted {predicted[label] * 1e3:8.2f})", flush=True)  # fmt: skip
        score = scores(measured)
        out.append({
            "case": case, "model": name, "layers": len(result.geometry),
            "search_s": result.search_s, "plan_s": plan_s,
            "handoff_s": result.handoff_s, "segment_s": result.segment_s,
            "schemes": list(result.plan.schemes), "segments": [list(r) for r in result.plan.layers],
            "predicted_s": predicted, "measured_s": measured, "score": score,
            "runs_s": runs_s,
            **({"ort_s": median_of(ort_runs_s), "ort_runs_s": ort_runs_s} if ort_runs_s else {}),
            "confirmed_s": dict(confirmed.confirmed_s), "confirm_kept": confirmed.kept,
            "confirm_s": confirm_s,
            "estimators": "retrained with this cluster's traces" if args.retrain else
                          args.estimators or "shipped",
            "cfs_period_ms": control.cfs_period_us(args.quota) / 1e3,
            "commit": _commit(), "cpu": cpu_model(), "target": args.target,
            "client_cores": sorted(os.sched_getaffinity(0)),
        })  # fmt: skip
        print(f"  {case} {name}: flexpie score {score['flexpie']:.2f}, best "
              f"{min(measured, key=measured.get)}, search {result.search_s * 1e3:.1f} ms",
              flush=True)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", nargs="+", default=["ring4-1000", "ps4-200", "ring3-50"],
                        choices=list(CASES))  # fmt: skip
    parser.add_argument("--model", nargs="*", default=["mobilenet", "resnet18"],
                        choices=list(MODELS))  # fmt: skip
    parser.add_argument("--quota", type=float, default=0.45, help="cores per device")
    parser.add_argument("--target", choices=TARGETS, default="generic",
                        help="what the devices' code is built for (device_target)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every plan")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per plan and round")
    parser.add_argument("--confirm", type=int, default=0, metavar="N",
                        help="also FlexPie confirmed end to end (plan --confirm-plans N): "
                        "timed as 'flexpie-confirmed' (default 0: not)")  # fmt: skip
    parser.add_argument("--ort", action="store_true",
                        help="also ONNX Runtime on the model's twin (ort.py) on one device, in "
                        "every round")  # fmt: skip
    parser.add_argument("--collect", action="store_true", help="append this cluster's traces")
    parser.add_argument("--collect-idle", action="store_true",
                        help="append this cluster's transfers after idle gaps only")  # fmt: skip
    parser.add_argument("--collect-joins", action="store_true",
                        help="append the joins only, timed on the home device (with a fresh "
                        "--db: each a label of its own, for how labels repeat)")  # fmt: skip
    parser.add_argument("--limit", type=int, default=300, help="tiles timed when collecting")
    parser.add_argument("--trace-sample", nargs="*", default=["mobilenet", "resnet18"],
                        choices=list(MODELS), help="models --collect traces --limit tiles of")  # fmt: skip
    parser.add_argument("--trace-whole", nargs="*", default=["bert"], choices=list(MODELS),
                        help="models whose every tile --collect traces too (after --limit "
                        "tiles of the --trace-sample models)")  # fmt: skip
    parser.add_argument("--traces", default="benchmarks/results/flexpie_traces_zen3.jsonl")
    parser.add_argument("--estimators", default=None, help="default: the shipped estimators")
    parser.add_argument("--retrain", action="store_true",
                        help="plan with estimators fitted on --traces (after --collect)")  # fmt: skip
    parser.add_argument("--db", default="benchmarks/results/flexpie_profiles.jsonl")
    parser.add_argument("--out", default="benchmarks/results/flexpie_latency.json")
    parser.add_argument("--builds", default="build/flexpie-latency",
                        help="compiled plans kept between cases ('': none kept)")  # fmt: skip
    parser.add_argument("--builds-gb", type=float, default=30.0,
                        help="at most this many GB of kept builds (the least recently used go)")  # fmt: skip
    args = parser.parse_args()
    # killed (SIGTERM), still bring the cluster down: its tag comes from a temporary path
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    prune_builds(args.builds, args.builds_gb)
    out = Path(args.out)
    kept = []
    if out.exists():
        redone = {(c, m, cpu_model(), args.target) for c in args.case for m in args.model}
        kept = [
            r
            for r in json.loads(out.read_text())["runs"]
            if (r["case"], r["model"], r.get("cpu"), r.get("target", "generic")) not in redone
        ]  # per host CPU and device target
    # the command, host and date of every row (taken here: a case pins this process to a core)
    said = {k: v for k, v in stamp().items() if k != "commit"}
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.case:
            print(f"{case}: {CASES[case]}", flush=True)
            kept += [{**row, **said} for row in run_case(case, args, Path(tmp))]
            out.write_text(json.dumps({"quota": args.quota, "runs": kept}, indent=1) + "\n")
            prune_builds(args.builds, args.builds_gb)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
