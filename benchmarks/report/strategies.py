"""Report sections of the strategies and of ``optimize``: what each chose, measured beside
the best single device and ONNX Runtime in the same rounds."""

from __future__ import annotations

from markdown import bullets, median, ms, ratio, share, table
from sources import FIELDS, latest, load, source, titled


def optimize() -> str:
    """``benchmarks/optimize/bench.py``: every run's kept candidate, best single device, ORT."""
    rows = load("optimize.jsonl")
    out, spread, ort_ratios, in_worker = [], [], [], 0
    for r in rows:
        timed = {c["name"]: c["p50_ms"] for c in r["candidates"] if c["p50_ms"] is not None}
        singles = {k: v for k, v in timed.items() if k.endswith(" alone")}
        orts = {k.removeprefix("ORT on "): v for k, v in timed.items() if k.startswith("ORT on ")}
        single = min(singles, key=singles.get)
        ort = min(orts, key=orts.get) if orts else None
        kept = r["kept_p50_ms"]
        spread.append(singles[single] / kept)
        apart = r.get("ort_timed_in_worker", False)  # without the client's round trip
        in_worker += bool(ort and apart)
        if ort and not apart:
            ort_ratios.append(kept / orts[ort])
        out.append((
            r["model"], r["devices"],
            r["run"].removesuffix(" database") + (", stream" if r.get("objective") == "throughput"
                                                  else ""),
            r["kept"],
            ms(kept), f"{ms(singles[single])} {single.removesuffix(' alone')}",
            ratio(singles[single], kept),
            f"{ms(orts[ort])} {ort}{', in worker' if apart else ''}" if ort else None,
            ratio(kept, orts[ort]) if ort else None, f"{r['search_s']:.0f}",
        ))  # fmt: skip
    spreading = [r for r in rows if not r["kept"].endswith(" alone")]
    reached = _strategies_reached(rows)
    return titled(
        "optimize.jsonl", rows,
        ("model", "devices", "database", "kept", "kept p50 ms", "best single ms",
         "speed-up", "ORT best ms", "time / ORT", "search s"),
        out,
        bullets([
            "A database marked `stream`: the throughput objective, every candidate (ONNX "
            "Runtime one request at a time) timed with requests in flight; its ms are per "
            "request.",
            f"{len(rows)} runs; a plan over several devices was kept in {len(spreading)} "
            f"(of {', '.join(sorted({r['model'] for r in spreading}))}), one device in the "
            "rest.",
            f"Speed-up over the best single device measured in the same rounds: median "
            f"{median(spread):.2f}x, highest {max(spread):.2f}x.",
            f"Against ONNX Runtime's best device in the same rounds ({len(ort_ratios)} runs "
            f"with an ONNX file): our time is {min(ort_ratios):.2f}x-{max(ort_ratios):.2f}x "
            f"ORT's, median {median(ort_ratios):.2f}x; faster in "
            f"{sum(x < 1 for x in ort_ratios)}. Left out of that: {in_worker} runs on a "
            "cluster whose ONNX Runtime the worker timed itself, without the round trip "
            "from the client that our runs there pay (`in worker`, before 158cebd).",
            f"Strategies that applied: {reached['applied']}; of them {reached['timed']} "
            f"had a plan timed, {reached['one device']} planned one device (timed as that "
            f"device), {reached['over budget']} stopped at or not started within the budget, "
            f"{reached['below the top']} were not timed (predicted slower than the top three) "
            f"and {reached['failed']} failed. The kept candidate is the fastest measured by "
            "construction; a strategy stopped early is a candidate never weighed.",
        ]),
    )  # fmt: skip


def _strategies_reached(rows: list[dict]) -> dict[str, int]:
    """How far the strategies (not the single devices nor ORT) got in ``optimize``'s runs."""
    count = dict.fromkeys(
        ("applied", "timed", "one device", "over budget", "below the top", "failed"), 0
    )
    for r in rows:
        for c in r["candidates"]:
            status = c["status"]
            if c["name"].endswith(" alone") or c["name"].startswith("ORT on "):
                continue
            if status.startswith("not applicable"):
                continue
            count["applied"] += 1
            if status in ("timed", "kept"):
                count["timed"] += 1
            elif status.startswith("one device"):
                count["one device"] += 1
            elif status.startswith(("stopped", "not planned")):
                count["over budget"] += 1
            elif status.startswith("not timed"):
                count["below the top"] += 1
            else:
                count["failed"] += 1
    return count


def eop_cores() -> str:
    """``benchmarks/eop/table.py`` on two one-core workers, with ONNX Runtime."""
    data = load("eop_cores.json")
    out, vs_ort, vs_cpu = [], [], []
    for m in data["models"].values():
        s = {k: v["measured_ms"] for k, v in m["strategies"].items()}
        one_core = min(s["home"], s["other"])
        vs_ort.append(s["eop"] / s["onnxruntime"])
        vs_cpu.append(s["eop"] / s["single cpu"])
        out.append((
            m["spec"], m["key_ops"], m["strategies"]["eop"]["cut"],
            ms(m["strategies"]["eop"]["predicted_ms"]), ms(s["eop"]), ms(one_core),
            ms(s["single cpu"]), ms(s["onnxruntime"]), ratio(one_core, s["eop"]),
            ratio(s["eop"], s["single cpu"]), ratio(s["eop"], s["onnxruntime"]),
        ))  # fmt: skip
    return titled(
        "eop_cores.json", data,
        ("model", "key ops", "cut", "EOP predicted", "EOP measured", "best 1 core",
         "both cores", "ORT (both)", "speed-up vs 1 core", "time / both",
         "time / ORT"),
        out,
        bullets([
            f"EOP's measured time is {min(vs_cpu):.2f}x-{max(vs_cpu):.2f}x that of the two "
            f"cores as one device and {min(vs_ort):.2f}x-{max(vs_ort):.2f}x ONNX Runtime's "
            "on the same cores (ms, medians of rounds).",
        ]),
    )  # fmt: skip


def als() -> str:
    """``benchmarks/als/table3.py``: Lee et al.'s plans against their baselines and ORT."""
    parts = []
    for name in ("als.json", "als_cores.json"):
        data = load(name)
        out, slower, vs_ort = [], 0, []
        for r in data["rows"]:
            m = {k: v["measured_ms"] for k, v in r["measured"].items()}
            singles = {k: v for k, v in m.items() if k.endswith(" only")}
            priced = " / ".join(
                f"{r['measured'][k]['predicted_ms'] / v:.2f}x" for k, v in singles.items()
            )
            best = min(singles, key=singles.get)
            slower += m["OPT confirmed"] > singles[best]
            ort = m.get("onnxruntime")
            if ort:
                vs_ort.append(m["OPT confirmed"] / ort)
            out.append((
                r["model"], r["seq"], r["node_runs"] + r["edge_runs"], ms(m["OPT (ALS)"]),
                ms(m["OPT guarded"]), ms(m["OPT confirmed"]),
                f"{ms(singles[best])} {best.removesuffix(' only')}",
                ratio(singles[best], m["OPT confirmed"]), priced, ms(m.get("single cpu")),
                ms(ort), ratio(m["OPT confirmed"], ort),
            ))  # fmt: skip
        peer = (
            f" The confirmed plan takes {min(vs_ort):.2f}x-{max(vs_ort):.2f}x the time of ONNX "
            "Runtime on the model's torch twin with as many threads as the two devices have "
            "cores, timed in the same rounds (above 1.00x: ours slower)."
            if vs_ort else ""
        )  # fmt: skip
        parts += [
            source(name, data).line(), "",
            table(("model", "seq", "profiling runs", "ALS", "guarded", "confirmed",
                   "best single", "speed-up", "priced / run alone", "both cores", "ORT",
                   "time / ORT"), out),
            "",
            f"- The confirmed plan is slower than the best single device in {slower} of "
            f"{len(out)} rows (ms; speed-up is the best single device's time over the "
            "confirmed plan's; priced / run alone: each device alone, in the table's order of "
            f"devices, ALS's price of it over its measured time).{peer}",
            "",
        ]  # fmt: skip
    return "\n".join(parts[:-1])


def als_op_prices() -> str:
    """``benchmarks/als/op_prices.py``: one device's price by its operators (Lee et al.'s and
    EOP's profiles) against its run, before and after the unfused build took the rewrites."""
    rows = load("als_op_prices.jsonl")
    runs = latest(rows, lambda r: (r["model"], r["label"]))
    out, now_ratios, ort_ratios = [], [], []
    for model in dict.fromkeys(r["model"] for r in rows):
        before, now = runs.get((model, "before")), runs.get((model, "now"))
        if now is None:
            continue
        now_ratios.append(now["priced_ms"] / now["run_ms"])
        ort_ratios.append(now["run_ms"] / now["ort_ms"])
        out.append((
            model.split(":")[1] if model.startswith("hf:") else model,
            f"{before['priced_ms'] / before['run_ms']:.2f}x" if before else "-",
            ms(now["priced_ms"]), ms(now["run_ms"]), f"{now_ratios[-1]:.2f}x",
            ms(now["ort_ms"]), ratio(now["run_ms"], now["ort_ms"]),
        ))  # fmt: skip
    return "\n".join([
        source("als_op_prices.jsonl", rows).line(), "",
        table(("model", "price / run before", "price ms", "run ms", "price / run", "ORT ms",
               "run / ORT"), out),
        "",
        bullets([
            "One device (the CPU, both threads): the price is the operators' times summed, "
            "each its kernels in an instrumented run of the build without fusion; the run "
            "the fused build's, ONNX Runtime's on the same export and threads, all in the "
            "same interleaved rounds (medians). `before`: the same command at the commit "
            "before the unfused build took the fused build's rewrites (its own rounds).",
            f"Price over run now {min(now_ratios):.2f}x-{max(now_ratios):.2f}x (median "
            f"{median(now_ratios):.2f}x); the fused build's run over ONNX Runtime's "
            f"{min(ort_ratios):.2f}x-{max(ort_ratios):.2f}x (above 1.00x: ours slower).",
        ]),
    ])  # fmt: skip


def duet() -> str:
    """``benchmarks/duet/bench.py``: DUET's plans against each device alone and ORT."""
    data = load("duet.json")
    out = []
    for model, r in data["models"].items():
        singles = r["singles_ms"]
        best = min(singles, key=singles.get)
        ort = min(r["onnxruntime"].values())
        out.append((
            model, r["plan"]["strategy"], ms(r["duet"]["p50"]), ms(r["duet"]["p99"]),
            f"{ms(singles[best])} {best}", ratio(singles[best], r["duet"]["p50"]),
            ms(ort), ratio(r["duet"]["p50"], ort),
        ))  # fmt: skip
    return titled(
        "duet.json", data,
        ("model", "plan", "p50 ms", "p99 ms", "best single ms", "speed-up", "ORT ms",
         "time / ORT"),
        out,
        "- ORT is ONNX Runtime's faster mode (sequential or parallel) on the same two cores.",
    )  # fmt: skip


def edgepipe_throughput() -> str:
    """``benchmarks/edgepipe/throughput.py``: the latest run of each emulated case."""
    data = load("edgepipe_throughput.json")
    cases = latest(data["cases"], lambda c: (c["case"], c.get("batch", 1), c.get("target")))
    out = []
    for (case, batch, target), c in cases.items():
        case = f"{case} (this CPU)" if target == "host" else case
        best = {k: max(e["measured_per_s"] for e in v) for k, v in c["strategies"].items()}
        mine = median(e["measured_per_s"] for e in c["strategies"]["edgepipe"])
        bound = c["strategies"]["edgepipe"][0].get("bound_per_s")
        at_once = sum(c["together"].values()) if c.get("together") else None
        out.append((
            case, batch, f"{mine:.2f}", f"{best['gpipe']:.2f}", f"{best['pipedream']:.2f}",
            ratio(mine, best["gpipe"]), ratio(mine, best["pipedream"]),
            share(mine, bound) if bound else None, share(mine, at_once) if at_once else None,
            f"{c['ort_per_s']:.2f}" if "ort_per_s" in c else None,
            ratio(mine, c.get("ort_per_s")),
        ))  # fmt: skip
    # a case measured later carries its own command, commit, host and date
    stamped = {"rows": [{k: c[k] for k in FIELDS if k in c} if "commit" in c else {}
                        for c in cases.values()]}  # fmt: skip
    return titled(
        "edgepipe_throughput.json", stamped,
        ("case", "microbatch", "EdgePipe /s", "GPipe best /s", "PipeDream best /s", "vs GPipe",
         "vs PipeDream", "of bound", "of all at once", "ORT /s", "vs ORT"),
        out,
        "- Microbatches a second, steady state. EdgePipe's rate is the median over its "
        "deployments; the baselines' is the best of their device orders, so a ratio below "
        "1.00x is a loss. The bound is the sum of the rates of the devices a plan uses, each "
        "measured alone; `of all at once` sets EdgePipe's rate against the sum of the devices' "
        "rates while every one runs the whole model at the same time (cases measured since "
        "2026-11-30): on this two-core host the devices busy together get less than alone. "
        "`ORT /s` is ONNX Runtime on the model's torch twin held as the case's fastest device "
        "(one thread, its quota), timed in the same rounds (cases measured with `--ort`); "
        "`vs ORT` below 1.00x: the whole cluster is slower than that one device. The devices' "
        "code is built for generic x86-64 (as the paper's boards, whose CPU a build would not "
        "name) but in the cases marked `this CPU`; ONNX Runtime uses this CPU's vectors "
        "either way.",
    )  # fmt: skip


def edgepipe_exported() -> str:
    """``benchmarks/edgepipe/exported.py``: exports pipelined over two one-core devices."""
    rows = load("edgepipe_exported.json")
    out = [
        (r["model"], r["source"], r["layers"], f"{r['single_per_s']:.1f}",
         f"{r['pipelined_per_s']:.1f}", f"{r['ort_per_s']:.1f}",
         ratio(r["pipelined_per_s"], r["single_per_s"]),
         ratio(r["pipelined_per_s"], r["ort_per_s"]))
        for r in rows if r["stage"] == "ok"
    ]  # fmt: skip
    return titled(
        "edgepipe_exported.json", rows,
        ("model", "from", "layers", "one core /s", "pipelined /s", "ORT /s",
         "vs one core", "vs ORT"),
        out,
    )  # fmt: skip


def edgepipe_torch() -> str:
    """``benchmarks/edgepipe/torch_pipelining.py``: EdgePipe against torch.distributed.pipelining
    with the same split on the same emulated cluster, ONNX Runtime on one of its devices."""
    r = load("edgepipe_torch.json")
    out = [(
        f"{r['model']} ({r['image']} px)", r["case"], r["microbatches"],
        " / ".join(f"{b - a + 1}" for a, b in r["torch_pieces"]),
        f"{r['edgepipe_per_s']:.2f}", f"{r['edgepipe_steady_per_s']:.2f}",
        f"{r['torch_per_s']:.2f}", f"{r['ort_one_device_per_s']:.2f}",
        ratio(r["edgepipe_per_s"], r["torch_per_s"]),
        ratio(r["edgepipe_per_s"], r["ort_one_device_per_s"]),
    )]  # fmt: skip
    return titled(
        "edgepipe_torch.json", r,
        ("model", "cluster", "microbatches", "pieces a stage", "EdgePipe /s", "(steady)",
         "torch /s", "ORT one device /s", "vs torch", "vs ORT"),
        out,
        "- Rates of a whole batch, fill and drain included (EdgePipe's steady rate beside); "
        "torch's stages are EdgePipe's, as pieces of the model (embedding, block halves, head).",
    )  # fmt: skip


def flexpie_latency() -> str:
    """``benchmarks/flexpie/latency.py``: the latest confirmed run of each cluster and model."""
    data = load("flexpie_latency.json")
    confirmed = [r for r in data["runs"] if "flexpie-confirmed" in r["score"]]
    runs = latest(confirmed, lambda r: (r["case"], r["model"]))
    out, scores, speed, vs_ort = [], [], [], []
    for (case, model), r in sorted(runs.items()):
        m = r["measured_s"]
        baselines = {k: v for k, v in m.items() if not k.startswith("flexpie")}
        best = min(baselines, key=baselines.get)
        scores.append(r["score"]["flexpie-confirmed"])
        speed.append(m["single"] / m["flexpie-confirmed"])
        ort = r.get("ort_s")
        if ort:
            vs_ort.append(m["flexpie-confirmed"] / ort)
        out.append((
            case, model, ms(m["flexpie"], seconds=True),
            ms(m["flexpie-confirmed"], seconds=True),
            ratio(m["flexpie-confirmed"], r["predicted_s"]["flexpie-confirmed"]),
            f"{ms(baselines[best], seconds=True)} {best}",
            ms(m["single"], seconds=True), ratio(m["single"], m["flexpie-confirmed"]),
            f"{r['score']['flexpie-confirmed']:.2f}", ms(ort, seconds=True),
            ratio(m["flexpie-confirmed"], ort),
        ))  # fmt: skip
    peer = (
        [f"ONNX Runtime on one device of the cluster, timed in the same rounds ({len(vs_ort)} "
         f"runs): the confirmed plan takes {min(vs_ort):.2f}x-{max(vs_ort):.2f}x its time, "
         f"ahead of it in {sum(v < 1 for v in vs_ort)} (above 1.00x: ours slower)."]
        if vs_ort else []
    )  # fmt: skip
    # a run measured later carries its own command, commit, host and date
    stamped = {"rows": [{k: r[k] for k in FIELDS if k in r} if "host" in r else {}
                        for r in runs.values()]}  # fmt: skip
    return titled(
        "flexpie_latency.json", stamped,
        ("cluster", "model", "planned ms", "confirmed ms", "time / price",
         "best baseline ms", "one device ms", "speed-up", "score", "ORT ms", "time / ORT"),
        out,
        bullets([
            f"{len(out)} runs. The score is the fastest time measured in the round over the "
            f"confirmed plan's (1.00: nothing was faster): 1.00 in "
            f"{sum(s >= 0.995 for s in scores)}, mean {sum(scores) / len(scores):.2f}, "
            f"lowest {min(scores):.2f}.",
            f"Over one device of the cluster: {min(speed):.2f}x-{max(speed):.2f}x, median "
            f"{median(speed):.2f}x.",
            *peer,
        ]),
    )  # fmt: skip


def flexpie_ort() -> str:
    """``benchmarks/flexpie/ort.py``: ONNX Runtime on one such device beside FlexPie's medians."""
    data = load("flexpie_ort_zen5.json")
    out = [
        (model, ms(m["ort_ms"]), ms(m["tvm_host_ms"]), ms(m["tvm_generic_ms"]),
         ms(m["cluster_single_ms"]),
         ms(m["flexpie_ms"]), ratio(m["flexpie_ms"], m["ort_ms"]))
        for model, m in data["models"].items()
    ]  # fmt: skip
    slower = sum(m["flexpie_ms"] > m["ort_ms"] for m in data["models"].values())
    return titled(
        "flexpie_ort_zen5.json", data,
        ("model", "ORT one device", "TVM for this CPU", "TVM generic x86-64",
         "cluster's one device",
         "FlexPie median", "FlexPie / ORT"),
        out,
        "- FlexPie's median over the clusters it ran on this host is "
        f"slower than ONNX Runtime on one of the cluster's devices for {slower} of "
        f"{len(out)} models (ms).",
    )  # fmt: skip


def flexpie_exported() -> str:
    """``benchmarks/flexpie/exported.py``: exports planned, partitioned and checked."""
    rows = load("flexpie_exported.json")
    out = [
        (r["model"], r["source"], r["stage"], r.get("layers"),
         ", ".join(f"{k} {v}" for k, v in (r.get("schemes") or {}).items()),
         max((r.get("rel_err") or {"-": 0}).values()))
        for r in rows
    ]  # fmt: skip
    return titled(
        "flexpie_exported.json", rows,
        ("model", "from", "stage", "layers", "schemes", "largest error"),
        out,
    )  # fmt: skip


def flexpie_retraced() -> str:
    """``benchmarks/flexpie/retraced.py``: plans by the estimators before and after traces
    were added, timed in the same rounds."""
    rows = load("flexpie_retraced.jsonl")
    out = []
    for r in latest(rows, lambda r: (r["case"], r["model"], r["host"])).values():
        b, n = r["before"], r["now"]
        out.append((
            r["case"], r["model"], ms(b["priced_ms"]), ms(b["median_ms"]),
            ratio(b["median_ms"], b["priced_ms"]), ms(n["priced_ms"]), ms(n["median_ms"]),
            ratio(n["median_ms"], n["priced_ms"]), ratio(n["median_ms"], b["median_ms"]),
            ms(r["ort_one_device_ms"]), ratio(n["median_ms"], r["ort_one_device_ms"]),
        ))  # fmt: skip
    return titled(
        "flexpie_retraced.jsonl", rows,
        ("cluster", "model", "before: priced ms", "before: ran ms", "time / price",
         "now: priced ms", "now: ran ms", "time / price", "now / before", "ORT ms", "now / ORT"),
        out,
        "- Both plans and ONNX Runtime on one device of the cluster timed in the same rounds "
        "(medians over every run); `now / before` below 1.00x: the plan by the new estimators "
        "ran faster; `now / ORT` above 1.00x: the cluster slower than that one device.",
    )  # fmt: skip


def edgepipe_planner() -> str:
    """``benchmarks/edgepipe/planner_time.py``: the DP's time as devices grow."""
    data = load("edgepipe_planner.json")
    out = [
        (r["model"], r["devices"], r["kinds"], r["layers"], f"{r['dp_best_of_5_s']:.4f}",
         f"{r['naive_dp_s']:.3f}" if r["naive_dp_s"] is not None else None, r["stages"])
        for r in data["rows"]
    ]  # fmt: skip
    return titled(
        "edgepipe_planner.json", data,
        ("model", "devices", "kinds", "layers", "category DP s (best of 5)",
         "naive DP s", "stages"),
        out,
    )  # fmt: skip


def flexpie_estimators() -> str:
    """``benchmarks/flexpie/estimators.py``: the XGBoost estimators' held-out error."""
    data = load("flexpie_estimators.json")
    out = []
    for name, what in (("compute", "a tile's compute"), ("sync", "a transfer"),
                       ("rearrange", "a join")):  # fmt: skip
        e = data[name]
        again = e.get("repeat", {}).get("mape")
        out.append((
            what, e["traces"], e["workloads"], f"{100 * e['mape_mean']:.1f} %",
            f"{100 * e['median_ape']:.1f} %", f"{100 * again:.1f} %" if again else None,
        ))  # fmt: skip
    return titled(
        "flexpie_estimators.json", data,
        ("estimator of", "traces", "workloads", "held-out MAPE", "median error",
         "same workload timed again"),
        out,
        "- Held out by workload over several seeds; the last column is one timing of a "
        "workload taken as the prediction of another, the floor this host's noise sets.",
    )  # fmt: skip


SECTIONS = {
    "optimize": optimize,
    "eop-cores": eop_cores,
    "als": als,
    "als-op-prices": als_op_prices,
    "duet": duet,
    "edgepipe-planner": edgepipe_planner,
    "edgepipe-throughput": edgepipe_throughput,
    "edgepipe-exported": edgepipe_exported,
    "edgepipe-torch": edgepipe_torch,
    "flexpie-latency": flexpie_latency,
    "flexpie-ort": flexpie_ort,
    "flexpie-exported": flexpie_exported,
    "flexpie-estimators": flexpie_estimators,
    "flexpie-retraced": flexpie_retraced,
}
