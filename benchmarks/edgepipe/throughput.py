"""EdgePipe's throughput on emulated edge clusters, against GPipe, PipeDream and each device alone.

    sudo .venv/bin/python benchmarks/edgepipe/throughput.py [--case homogeneous case2 ...]
        [--microbatches 8] [--orders 3] [--edgepipe-runs 1] [--model-arg hidden=384 ...] [--ort]
        [--target generic|host]

Each case is a ``tvm-hetero cluster up`` of this machine's two cores: every device a
runtime-only worker in its own network namespace, held to its ``cpu_quota`` (cgroup CPU quota,
in cores) on its core, its code built for ``--target`` (generic x86-64 by default, as every
case was run before 2026-12-03, or this host's CPU), the links between devices shaped with
``tbf`` to the slower NIC of the
two (devices meet through a switch in the paper; here a mesh of point-to-point links at that
rate). The paper's cases (Table 4: RCC-VE boards at 100 / 75 / 25 / 10 % CPU, MinnowBoards at
about 0.7 of an RCC-VE, 5 Mbit/s - 1 Gbit/s) are scaled to 0.4 core for a full RCC-VE.

The model is DeiT-Small (ViT at hidden 384, 6 heads, 12 layers, batch 1; the paper's Fig. 8),
a size this machine runs in tenths of a second per image on half a core.

Per case: EdgePipe plans from layer times measured on each kind of device (on the workers
themselves) and the links as probed (``cluster probe``; ``--declared-links``: the spec's rates);
its plan, GPipe's even split and PipeDream's partitioner over
``--orders`` random device orders, and every device alone are compiled and run pipelined
(``--microbatches`` in flight); the plans are timed in ``--repeat`` interleaved rounds, each
opened anew a round with one warm-up batch and one timed batch, and the median taken.
Throughput is the steady rate, once the pipeline is full (microbatches leaving it per second:
a stream's rate, as the paper measured over long runs); the batch's rate, fill and drain
included, is kept beside it. The bound is the sum of the measured single-device rates of the
devices a plan uses; beside it, every device runs its whole model at the same time
(``together``): what the host gives the devices when all are busy at once. With ``--ort``,
each round also times ONNX Runtime on the model's torch twin held as the case's fastest device
(one thread on core 0 under its quota): what the cluster's best device does with a stock
runtime.
``vit-large-capped`` and ``vit-huge-capped``: ViT-Large / ViT-Huge (at 112 pixels) on devices
whose ``memory_bytes`` no single one meets, enforced by each worker's memory cgroup (a stage
must fit while its library loads: ``LOAD_COPIES`` times its weights); a run a worker does not
survive is kept with its error.
Results: ``benchmarks/results/edgepipe_throughput.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tvm_hetero import api
from tvm_hetero.devices import ClusterSpec
from tvm_hetero.emulation import control
from tvm_hetero.emulation.layout import cluster_tag, plan_layout
from tvm_hetero.errors import RunError
from tvm_hetero.frontends import load_model
from tvm_hetero.plan import edgepipe
from tvm_hetero.profiling.link_probe import measured_cluster, probe_link
from tvm_hetero.runtime.executor import Executor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from emulated import TARGETS, device_target
from stamp import stamp

from tvm_hetero.runtime.stats import pipeline_stats
from tvm_hetero.strategies.edgepipe import planner as strategy

RCC = 0.4  # cores of a full RCC-VE board, scaled to this machine (4 of them leave 0.4 core
# for the client, the pulls and the network: at 0.5 the workers' quotas took every cycle, and
# what the client and the kernel's network work took came out of the busy workers' quotas)
CASES: dict[str, list[tuple[int, float, float]]] = {  # (count, CPU share of an RCC-VE, Mbit/s)
    "homogeneous": [(4, 1.0, 1000)],
    "pair": [(2, 2.0, 1000)],  # one device per core: no two workers share a core's caches
    "case1": [(2, 1.0, 1000), (2, 0.7, 1000)],
    "case2": [(1, 1.0, 1000), (1, 0.75, 1000), (1, 0.25, 1000), (1, 0.7, 1000)],
    "case3": [(2, 1.0, 40), (2, 0.7, 10)],
    "case4": [(1, 1.0, 30), (1, 1.0, 20), (1, 0.7, 10), (1, 0.7, 5)],
    "case5": [(2, 1.0, 50), (2, 0.1, 20), (1, 0.7, 30)],
    "case6": [(1, 1.0, 100), (1, 0.75, 60), (1, 0.5, 40), (1, 0.25, 20), (1, 0.1, 10)],
    "vit-large-capped": [(6, 0.67, 1000)],  # the homogeneous case's 1.6 cores, in 6
    "vit-huge-capped": [(6, 0.67, 1000)],
}
CAPPED: dict[str, tuple[str, int]] = {  # case -> (zoo model, each device's memory in MiB)
    "vit-large-capped": ("vit-large", 768),  # 1.13 GiB of weights, 3.4 GiB while loading
    "vit-huge-capped": ("vit-huge", 1536),  # 2.35 GiB, 7.1 GiB while loading
}
CAPPED_IMAGE = 112
"""The capped cases' image size: the paper models' weights (what the caps are about) at a
quarter of their 224-pixel compute, so that a run takes minutes on 0.4-core devices."""


def spec_file(case: str, folder: Path, target: str = "generic") -> Path:
    """The cluster spec of a case: devices alternate between the two cores, their code built
    for ``target`` (:func:`emulated.device_target`)."""
    devices, nic = [], {}
    for kind, (count, share, mbps) in enumerate(CASES[case]):
        for _ in range(count):
            name = f"d{len(devices)}-k{kind}"
            devices.append({
                "name": name, "kind": "cpu", "target": device_target(target),
                "cores": [len(devices) % 2], "cpu_quota": round(RCC * share, 3),
            })  # fmt: skip
            if case in CAPPED:  # the worker's cgroup holds it to what the planner is told
                devices[-1]["memory_bytes"] = CAPPED[case][1] * 2**20
            nic[name] = mbps
    names = list(nic)
    links = [
        {"a": a, "b": b, "bandwidth_mbps": min(nic[a], nic[b])}
        for i, a in enumerate(names) for b in names[i + 1 :]
    ]  # fmt: skip
    path = folder / f"{case}.json"
    path.write_text(json.dumps({"topology": "mesh", "devices": devices, "links": links}))
    return path


@contextlib.contextmanager
def warmed(deployment, feeds: list) -> Iterator[tuple[Executor, list]]:
    """``deployment`` opened, ``feeds`` placed as a batch of microbatches and run once untimed;
    the executor and the batch."""
    with Executor(deployment, timeout_s=300) as ex:
        batches = [ex.place_inputs(f) for f in feeds]
        ex.run_many(batches)
        yield ex, batches


def throughput(deployment, feeds, repeat: int) -> tuple[float, float]:
    """Microbatches per second of a pipelined run: once the pipeline is full (one over the
    time between consecutive microbatches leaving it) and over the whole batch (fill and drain
    included); medians of ``repeat`` batches."""
    with warmed(deployment, feeds) as (ex, batches):
        rates = [batch_rates(ex, batches) for _ in range(repeat)]
    return statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)


def together_rates(deployments: dict[str, object], feeds: list, repeat: int) -> dict[str, float]:
    """Each device's rate (microbatches a second, whole batches) while every device runs its
    whole model at once, ``repeat`` batches of ``feeds`` each, started together: what the host
    gives the devices when all are busy, which the bound (each device's rate alone, summed)
    assumes it gives. Devices that finish first leave the others more room: on unequal
    devices the figure is generous."""
    with contextlib.ExitStack() as stack:
        opened = {n: stack.enter_context(warmed(d, feeds)) for n, d in deployments.items()}
        start, rates = threading.Barrier(len(opened)), {}

        def run(name: str) -> None:
            ex, batches = opened[name]
            start.wait()
            began = time.perf_counter()
            for _ in range(repeat):
                ex.run_many(batches)
            rates[name] = repeat * len(feeds) / (time.perf_counter() - began)

        threads = [threading.Thread(target=run, args=(n,)) for n in opened]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return rates


def interleaved_rates(
    deployments: list, feeds: list, rounds: int, peer: Callable[[], float] | None = None
) -> tuple[list[list[tuple[float, float]] | RunError], list[float]]:
    """:func:`batch_rates` of each deployment in each of ``rounds`` rounds (each opened
    anew a round: a remote worker serves one session at a time; one untimed batch after
    opening); a deployment whose run failed keeps its error and is not run again. ``peer``,
    where given, is timed once a round before the deployments: its rates, a round each."""
    got: list[list[tuple[float, float]] | RunError] = [[] for _ in deployments]
    peer_rates = []
    for _ in range(rounds):
        if peer is not None:
            peer_rates.append(peer())
        for k, deployment in enumerate(deployments):
            if isinstance(got[k], RunError):
                continue
            try:
                with warmed(deployment, feeds) as (ex, batches):
                    got[k].append(batch_rates(ex, batches))
            except RunError as err:
                got[k] = err
    return got, peer_rates


def ort_peer(case: str, settings: dict, batch: int, runs: int, folder: Path):
    """ONNX Runtime on the model's torch twin (``benchmarks/torch_twins.py``) held as the
    case's fastest device is (one thread on core 0 under its quota): a function timing
    ``runs`` runs and giving microbatches a second, or ``None`` for a capped case (ONNX
    Runtime would hold the whole model on one device, which the caps forbid)."""
    if case in CAPPED:
        return None
    from ort_timing import held_run
    from torch_twins import onnx_twin

    quota = max(RCC * share for _, share, _ in CASES[case])
    twin, _ = onnx_twin("vit-base", folder, **settings, batch=batch)
    return lambda: 1e3 / statistics.median(held_run(twin, quota, runs))


def batch_rates(ex: Executor, batches: list) -> tuple[float, float]:
    """One timed batch of placed microbatches on an open executor: its steady rate and its
    whole batch's rate (microbatches per second)."""
    ex.run_many(batches)
    stats = pipeline_stats(ex.timeline, ex.finished_s)
    return 1 / stats.steady_s, stats.throughput


def run_case(case: str, model, args, folder: Path, peer: Callable[[], float] | None) -> dict:
    """Plan, build and time one case on its cluster; ``peer`` (``ort_peer``) in every round."""
    path = spec_file(case, folder, args.target)
    spec, tag = ClusterSpec.load(path), cluster_tag(path)
    cluster = control.up(spec, plan_layout(spec, tag))
    try:
        devices = list(cluster.devices)
        links = cluster
        if not args.declared_links:  # what ``cluster probe -o`` writes, as a user would plan
            probes = [probe_link(cluster, link, repeat=3) for link in cluster.links]
            links = measured_cluster(cluster, probes)
            for p in probes:
                print(f"  link {p.link.a}-{p.link.b}: {p.bandwidth_mbps:.1f} Mbit/s of "
                      f"{p.link.bandwidth_mbps:g}, {p.latency_ms:.2f} ms", flush=True)  # fmt: skip
        start = time.perf_counter()
        result = strategy.plan_with_measurements(model, devices, links, db=args.db)
        plan_s = time.perf_counter() - start
        feeds = [model.random_inputs(seed) for seed in range(args.microbatches)]
        problem = result.problem
        measured: dict[str, float | None] = {}
        built: dict[str, tuple[str, object]] = {}  # compute class -> (device, deployment)
        alone_builds: dict[str, object] = {}
        for d, device in enumerate(devices):  # every device alone; one build per class
            alone = edgepipe.evaluate(problem, [(0, problem.n_layers - 1, d)])
            if not alone.feasible:
                measured[device.name] = None
                print(f"  {device.name} alone: does not fit its memory", flush=True)
                continue
            key = device.compute_class
            if key not in built:
                plan = strategy.to_plan(result.layers, problem, alone, "single")
                built[key] = (device.name, api.compile(model, [device], plan).deployment)
            first, deployment = built[key]
            # on this device's worker, with its cores (which the worker is pinned to)
            here = [dataclasses.replace(d, host=device.host, cores=device.cores)
                    if d.name == first else d for d in deployment.devices]  # fmt: skip
            deployment = dataclasses.replace(deployment, devices=tuple(here))
            # one device at a time, the median of --repeat batches of four (one batch of four
            # read some devices 10-25 % slow, and every bound with them)
            measured[device.name] = throughput(deployment, feeds[:4], args.repeat)[0]
            alone_builds[device.name] = deployment
            print(f"  {device.name} alone: {measured[device.name]:.3f} /s", flush=True)
        together = together_rates(alone_builds, feeds[:4], args.repeat)
        print(
            f"  every device at once, each the whole model: {sum(together.values()):.3f} /s "
            f"({', '.join(f'{n} {r:.3f}' for n, r in together.items())})",
            flush=True,
        )
        rows = {"edgepipe": [(result.partition, None)] * args.edgepipe_runs}
        orders = edgepipe.random_orders(len(devices), args.orders, seed=1)
        rows["gpipe"] = [(edgepipe.gpipe(problem, o), o) for o in orders]
        rows["pipedream"] = [(edgepipe.pipedream(problem, o), o) for o in orders]
        out = {"case": case, "devices": spec.to_dict()["devices"], "plan_s": plan_s,
               "search_s": result.search_s, "alone": measured, "together": together,
               "strategies": {},
               "links": [{"a": ln.a, "b": ln.b, "declared_mbps": d.bandwidth_mbps,
                          "planned_mbps": ln.bandwidth_mbps, "latency_ms": ln.latency_ms}
                         for ln, d in zip(links.links, cluster.links, strict=True)]}  # fmt: skip
        # every plan built first, then timed in rounds, one batch each a round, so a slow
        # spell of the host falls on all of them (run one after the other, EdgePipe's three
        # deployments read 72-77 % of the bound and PipeDream's, the same split, 83-97 %)
        compiled, timed = {}, []
        for name, parts in rows.items():
            out["strategies"][name] = []
            for part, order in parts:
                plan = strategy.to_plan(result.layers, problem, part, name)
                used = list(plan.devices)
                if not part.feasible:
                    out["strategies"][name].append({"order": order, "devices": used, "fits": False})
                    print(f"  {name:>9}: a stage does not fit its device's memory", flush=True)
                    continue
                key = (tuple(used), tuple(map(tuple, plan.layers)))
                if key not in compiled:  # a plan met again (EdgePipe's runs) is built once
                    compiled[key] = api.compile(model, api.in_plan_order(devices, plan), plan)
                timed.append((name, order, part, plan, compiled[key].deployment))
        rates, ort_rates = interleaved_rates([t[-1] for t in timed], feeds, args.repeat, peer)
        if ort_rates:
            out["ort_per_s"] = statistics.median(ort_rates)
            print(f"  ONNX Runtime on the fastest device alone: {out['ort_per_s']:.3f} /s",
                  flush=True)  # fmt: skip
        for (name, order, part, plan, _), got in zip(timed, rates, strict=True):
            used = list(plan.devices)
            if isinstance(got, RunError):  # a worker killed (memory) or lost: kept, not fatal
                out["strategies"][name].append(
                    {"order": order, "devices": used, "error": str(got)[:200]}
                )
                print(f"  {name:>9} on {len(used)} devices: failed: {got}", flush=True)
                continue
            rate, whole = (statistics.median(r[i] for r in got) for i in (0, 1))
            alone_rates = [measured[n] for n in used]
            bound = sum(alone_rates) if None not in alone_rates else float("nan")
            entry = {
                "order": order, "devices": used, "layers": [list(r) for r in plan.layers],
                "predicted_per_s": 1 / part.period_s if np.isfinite(part.period_s) else 0.0,
                "measured_per_s": rate, "batch_per_s": whole, "fits": True,
                "bound_per_s": bound if np.isfinite(bound) else None,
                "peak_stage_bytes": max(plan.memory_bytes),
            }  # fmt: skip
            out["strategies"][name].append(entry)
            print(f"  {name:>9} on {len(used)} devices {plan.layers}: {rate:.3f} /s "
                  f"(batch {whole:.3f})"
                  f"(predicted {entry['predicted_per_s']:.3f}, bound {bound:.3f}, "
                  f"{rate / bound:.0%})", flush=True)  # fmt: skip
        return out
    finally:
        control.down(tag)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument(
        "--batch", type=int, nargs="+", default=[1],
        help="microbatch sizes (the model compiled at each; a sweep: images per second)",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--orders", type=int, default=3)
    parser.add_argument(
        "--edgepipe-runs", type=int, default=1,
        help="deployments of EdgePipe's plan (one plan: a spread to set beside the orders')",
    )  # fmt: skip
    parser.add_argument("--model-arg", nargs="*", default=["hidden=384", "heads=6", "ffn=1536"])
    parser.add_argument(
        "--declared-links", action="store_true",
        help="plan from the links' declared rates (default: from the links as probed)",
    )  # fmt: skip
    parser.add_argument("--target", choices=TARGETS, default="generic",
                        help="what the devices' code is built for (generic x86-64 or this CPU)")  # fmt: skip
    parser.add_argument(
        "--ort", action="store_true",
        help="also ONNX Runtime on the model's twin, held as the fastest device, every round",
    )  # fmt: skip
    parser.add_argument("--db", default="benchmarks/results/edgepipe_profiles.jsonl")
    parser.add_argument("--out", default="benchmarks/results/edgepipe_throughput.json")
    args = parser.parse_args()
    why = control.missing_privilege()
    if why:
        sys.exit(f"throughput: {why}")
    settings = {k: int(v) for k, v in (a.split("=") for a in args.model_arg)}
    results = []
    out = Path(args.out)
    if out.exists():
        redone = {(c, b, args.target) for c in args.case for b in args.batch}
        results = [
            r for r in json.loads(out.read_text())["cases"]
            if (r["case"], r.get("batch", 1), r.get("target", "generic")) not in redone
        ]  # fmt: skip
    # a fixed folder: the cluster's tag comes from the spec's path, so a run killed before its
    # clean-up leaves what the next run's ``up`` removes first; SIGTERM cleans up too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    folder = Path(tempfile.gettempdir()) / "tvm-hetero-edgepipe-bench"
    folder.mkdir(exist_ok=True)
    for batch in args.batch:
        for case in args.case:
            if case in CAPPED:
                model = load_model(CAPPED[case][0], image=CAPPED_IMAGE, batch=batch)
            else:
                model = load_model("vit-base", **settings, batch=batch)
            print(f"{case}, microbatch size {batch}: {CASES[case]}", flush=True)
            peer = ort_peer(case, settings, batch, args.microbatches, folder) if args.ort else None
            measured = run_case(case, model, args, folder, peer)
            results.append({**measured, "batch": batch, "microbatches": args.microbatches,
                            "target": args.target,
                            "repeat": args.repeat,
                            "edgepipe_runs": args.edgepipe_runs, **stamp()})  # fmt: skip
            out.write_text(json.dumps({"model": settings, "microbatches": args.microbatches,
                                       "cases": results}, indent=1) + "\n")  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
