"""Report sections of the lent GPU boxes (``benchmarks/gpu/``): TVM beside torch, what a
crossing between the CPU and the GPU costs, EOP's and DUET's plans measured on the box."""

from __future__ import annotations

from markdown import ms, ratio, table
from sources import load, source, titled


def _us(ms_value: float | None) -> str | None:
    return None if ms_value is None else f"{ms_value * 1e3:.0f}"


def versus_torch() -> str:
    """``versus_torch.py``: TVM with and without CUDA graphs, torch eager and torch's graph."""
    return _versus(
        "gpu_versus_torch.jsonl", True,
        "- p50: the median of 5 interleaved rounds' medians of 100 runs each; error: the "
        "largest relative difference from torch's output (`nan`: TVM's output was not finite).",
    )  # fmt: skip


def versus_torch_again() -> str:
    """``versus_torch.py`` again, GPU kernels compiled without fast math (built on the box)."""
    return _versus(
        "gpu_versus_torch_again.jsonl", False,
        "- p50: the median of 5 interleaved rounds' medians of 100 runs each (TVM's kernels are "
        "dlight's, without `--use_fast_math`); error: the largest relative difference from "
        "torch's output.",
    )  # fmt: skip


def _versus(name: str, launch: bool, note: str) -> str:
    """TVM's CUDA-graph build beside torch (and, with ``launch``, TVM launching every kernel)."""
    rows = load(name)
    out = []
    for r in rows:
        tvm = r["tvm_graph_p50_ms"]
        launched = (
            (ms(r["tvm_launch_p50_ms"]), ratio(r["tvm_launch_p50_ms"], tvm)) if launch else ()
        )
        out.append(
            (r["model"], ms(tvm), *launched, ms(r["torch_eager_p50_ms"]),
             ms(r["torch_cuda_graph_p50_ms"]), ratio(tvm, r["torch_eager_p50_ms"]),
             ratio(tvm, r["torch_cuda_graph_p50_ms"]), f"{r['tvm_graph_max_rel_err']:.1e}")
        )  # fmt: skip
    launch_columns = ("TVM launches ms", "graphs' gain") if launch else ()
    header = ("network", "TVM graphs ms", *launch_columns, "torch eager ms", "torch graph ms",
              "TVM / eager", "TVM / torch graph", "error vs torch")  # fmt: skip
    return titled(name, rows, header, out, note)


def dlight_kernels() -> str:
    """``gpu_tuning``'s first measure: dlight's schedule of each kernel, alone on the GPU."""
    rows = load("gpu_dlight_kernels.jsonl")
    totals: dict[str, float] = {}
    for r in rows:
        totals[r["model"]] = totals.get(r["model"], 0.0) + r["us"] * r["calls"]
    ranked = sorted(rows, key=lambda r: -r["us"] * r["calls"])
    out = [
        (r["model"], r["kernel"][:34], r["calls"], f"{r['us']:.1f}", f"{r['us'] * r['calls']:.0f}",
         f"{100 * r['us'] * r['calls'] / totals[r['model']]:.0f}")
        for r in ranked[:12]
    ]  # fmt: skip
    sums = ", ".join(f"{m} {t:.0f} us" for m, t in totals.items())
    return titled(
        "gpu_dlight_kernels.jsonl", rows,
        ("network", "kernel", "calls", "us a call", "us a run", "% of kernels"),
        out,
        f"- The 12 costliest of {len(rows)} kernels that reduce; their sums a run: {sums}. "
        "Median of 3 samples of 10 runs each, the kernel alone (its inputs in the GPU's cache).",
    )  # fmt: skip


def crossing_parts() -> str:
    """``crossing_parts.py``: the copies and hand-overs a crossing is made of."""
    name = "gpu_crossing/1_crossing_parts.json"
    data = load(name)
    sizes = [k for k in data if k.endswith("KiB")]
    parts = (("host to GPU, new tensor", "to_gpu_new_us"),
             ("host to GPU, kept tensor", "to_gpu_kept_us"),
             ("GPU to host, new tensor", "to_host_new_us"),
             ("GPU to host, kept tensor", "to_host_kept_us"))  # fmt: skip
    out = [(what, *(f"{data[s][key]:.1f}" for s in sizes)) for what, key in parts]
    out += [
        ("a job handed to another thread and back", f"{data['hand_over_there_and_back_us']:.1f}",
         None, None),
        ("`device.sync()` with nothing running", f"{data['sync_idle_us']:.1f}", None, None),
    ]  # fmt: skip
    return titled(
        name, data,
        ("part (us, median)", *sizes),
        out,
    )  # fmt: skip


def placements() -> str:
    """``latency.py --hand-over-too``: each device alone, forced placements, EOP's splits."""
    name = "gpu_crossing/4_latency_eop_plans.jsonl"
    rows = load(name)
    by = {}
    for r in rows:
        by.setdefault(r["artifact"].removesuffix(".tar"), {})[r["on_spot"]] = r
    out = [
        (artifact, runs[True]["copies_per_run"], _us(runs[True]["p50_ms"]),
         _us(runs[False]["p50_ms"]) if False in runs else None)
        for artifact, runs in by.items()
    ]  # fmt: skip
    return titled(
        name, rows,
        ("build (batch 16)", "copies a run", "p50 us", "p50 us, handed over"),
        out,
        "- `gpu`, `home`, `other`: one device; `split`: the matmuls forced to the GPU; "
        "`eop`: EOP's plan; `equal`, `fixed`: EOP's split baselines. Handed over: every unit "
        "run by its worker's thread instead of the thread that made it ready.",
    )  # fmt: skip


def eop() -> str:
    """``eop_table.py``: EOP's plans and baselines, predicted from the box's records, measured."""
    parts = []
    for name in ("gpu_crossing/4_eop_table.json", "gpu_crossing/5_eop_table.json"):
        rows = load(name)
        out = [
            (r["model"], r["strategy"], r["home"], ms(r["predicted_ms"]), ms(r["measured_ms"]),
             None if r["error_pct"] is None else f"{r['error_pct']:+.1f} %",
             ms(r["handed_over_ms"]))
            for r in rows
        ]  # fmt: skip
        parts += [source(name, rows).line(), "",
                  table(("model", "plan", "home", "predicted ms", "measured ms",
                         "error", "handed over ms"), out), ""]  # fmt: skip
    return "\n".join(parts[:-1])


def duet() -> str:
    """DUET's kept plans for the Siamese LSTM beside each device alone, timed together."""
    name = "gpu_duet/latency.jsonl"
    rows = load(name)
    cpu = next(r for r in rows if r["devices"] == ["cpu"])["p50_ms"]
    gpu = next(r for r in rows if r["devices"] == ["cuda:0"])["p50_ms"]
    out = [
        (r["artifact"].removesuffix(".tar"), " + ".join(r["devices"]), ms(r["p50_ms"]),
         ms(r["p99_ms"]), ratio(cpu, r["p50_ms"]), ratio(gpu, r["p50_ms"]))
        for r in rows
    ]  # fmt: skip
    return titled(
        name, rows,
        ("build", "devices", "p50 ms", "p99 ms", "speed-up over `cpu`",
         "speed-up over the GPU"),
        out,
    )  # fmt: skip


def box_convs() -> str:
    """``box_convs.py``: the channel tile's cap on the box's Xeon, beside torch (oneDNN)."""
    data = load("box_convs.json")
    rows = data["passes"][-1]["rows"]
    out = [
        (r["conv"], ms(r["width_us"]), ms(r["channel14_us"]), ms(r["channel_us"]),
         ms(r["torch_us"]), ratio(r["channel_us"], r["torch_us"]))
        for r in rows
    ]  # fmt: skip
    return titled(
        "box_convs.json", data,
        ("3x3 convolution", "width tile us", "channel tile, 14 positions us",
         "channel tile as built us", "torch us", "ours / torch"),
        out,
        "- One thread, the second pass (the first ran right after the box started).",
    )  # fmt: skip


def copies() -> str:
    """``copies.py`` (compile only): the copies a run makes with an operator on the GPU."""
    rows = load("gpu_copies.json")
    out = [
        (r["model"], r["place"], r["before"], r["before_weights"],
         f"{r['before_bytes'] / 2**20:.2f}", r["after"], f"{r['after_bytes'] / 2**20:.2f}")
        for r in rows
    ]  # fmt: skip
    return titled(
        "gpu_copies.json", rows,
        ("model", "on the GPU", "copies before", "of them weights", "MiB before",
         "copies now", "MiB now"),
        out,
    )  # fmt: skip


def exported() -> str:
    """``exported.py`` (compile only): exports built for the GPU, alone and split."""
    rows = load("gpu_exported.json")
    out = [
        (r["model"], r["stage"], f"{r['gpu_s']:.1f}" if r.get("gpu_s") else None,
         ", ".join(r.get("placed_on_gpu") or []),
         "yes" if any(r.get("gpu_code", {}).values()) else "no")
        for r in rows
    ]  # fmt: skip
    return titled(
        "gpu_exported.json", rows,
        ("model", "stage", "GPU build s", "on the GPU when split", "device code"),
        out,
    )  # fmt: skip


def outputs() -> str:
    """Every output the boxes computed against a CPU build here or against torch on the box."""
    first = load("gpu_outputs.json")
    crossing = load("gpu_crossing/outputs.json")
    duet = load("gpu_duet/outputs.json")

    def worst(rows: list[dict]) -> str:
        return f"{max(r['max_rel_error'] for r in rows):.1e}"

    crossing_rows = [r for rows in crossing.values() for r in rows]
    out = [
        ("GPU, CPU and CPU + GPU builds (H200)", len(first["against_cpu_builds"]),
         "a CPU build here", worst(first["against_cpu_builds"])),
        ("the crossing's builds (H200)", len(crossing_rows), "a CPU build here",
         worst(crossing_rows)),
        ("DUET's builds (H100)", len(duet), "a CPU build here", worst(duet)),
        ("BERT encoder and ResNet-18 (H200)", len(first["against_torch"]), "torch on the box",
         worst(first["against_torch"])),
    ]  # fmt: skip
    return "\n".join([
        source("gpu_outputs.json", first).line(),
        source("gpu_crossing/outputs.json", crossing).line(),
        source("gpu_duet/outputs.json", duet).line(),
        "",
        table(("what", "outputs", "against", "largest relative error"), out),
    ])  # fmt: skip


SECTIONS = {
    "gpu-versus-torch": versus_torch,
    "gpu-versus-torch-again": versus_torch_again,
    "gpu-dlight-kernels": dlight_kernels,
    "gpu-crossing-parts": crossing_parts,
    "gpu-placements": placements,
    "gpu-eop": eop,
    "gpu-duet": duet,
    "gpu-box-convs": box_convs,
    "gpu-copies": copies,
    "gpu-exported": exported,
    "gpu-outputs": outputs,
}
