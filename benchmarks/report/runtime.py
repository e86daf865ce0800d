"""Report sections of the runtime and the edge cluster's links."""

from __future__ import annotations

from markdown import ms, ratio, share, table
from sources import cpu_name, load, source, titled


def runtime_programs() -> str:
    """``benchmarks/runtime/programs.py`` and FlexPie's timeline: programs against dataflow."""
    rows = load("runtime_programs.jsonl")
    local = [r for r in rows if r["what"] == "runtime programs vs dataflow"]
    out = []

    def us(row: dict, key: str) -> str:
        return f"{row[key]:.1f}" if key in row else "-"

    for r in local:
        m = r["median_us"]
        # rows before the links carried values both ways timed the ping-pong on two links only
        both_timed = "c_one_way_two_links_us" in r
        one_link = us(r, "c_one_way_us") if both_timed else "-"
        two_links = us(r, "c_one_way_two_links_us" if both_timed else "c_one_way_us")
        if "alternating programs" in m:
            out.append((
                r.get("model", "chain of 64 adds"), r["where"], cpu_name(r["host"]),
                us(r, "per_crossing_us_native"),
                us(r, "per_crossing_slope_us_native"),
                f"{us(r, 'per_crossing_us_native_one_way_links')} "
                f"({us(r, 'per_crossing_slope_us_native_one_way_links')})"
                if "per_crossing_us_native_one_way_links" in r else "-",
                us(r, "per_crossing_us_programs"), us(r, "per_crossing_us_dataflow"),
                us(r, "per_run_us_native"), us(r, "per_run_us_native_caller_apart"),
                us(r, "per_run_us_programs"), us(r, "per_run_us_dataflow"),
                one_link, two_links, ms(m.get("onnxruntime")),
            ))  # fmt: skip
    flexpie = [
        (_plan(r), r["case"], cpu_name(r["host"]), ms(r["priced_ms"]), ms(native),
         ms(r["median_ms"]["Python programs"]), ms(r["median_ms"]["dataflow"]),
         ms(r["ort_one_device_ms"]), ratio(native, r["priced_ms"]),
         ratio(native, r["ort_one_device_ms"]),
         ms(r["between_steps_ms"]) if "between_steps_ms" in r else "-")
        for r in rows if r["what"].startswith("FlexPie")
        for native in [r["median_ms"]["native programs"]]
    ]  # fmt: skip
    return titled(
        "runtime_programs.jsonl", local,
        ("model", "workers", "CPU", "us a crossing: native", "(slope)",
         "a link each way (slope)", "Python programs", "dataflow",
         "us a run: native", "(caller apart)", "Python programs", "dataflow",
         "C ping-pong us", "(two links)", "ORT us"),
        out,
        source("runtime_programs.jsonl", [r for r in rows if r["what"].startswith("FlexPie")]).line(),
        "",
        table(("FlexPie plan", "cluster", "CPU", "priced ms", "native ms", "Python programs ms",
               "dataflow ms", "ORT one device ms", "native / priced", "native / ORT",
               "between steps ms"), flexpie),
    )  # fmt: skip


def _plan(row: dict) -> str:
    """A FlexPie row's model, and the plan run where it was not FlexPie's own (``timeline.py``
    writes a row for any plan it is given: ``layerwise``, ``fixed-InH``...)."""
    plan = row.get("plan", "flexpie")
    return row["model"] if plan == "flexpie" else f"{row['model']} ({plan})"


def runtime_real_models() -> str:
    """``benchmarks/runtime/real_models.py``: exports cut into many units, against one unit on
    one core and on two, and ONNX Runtime on the same export and two threads."""
    data = load("runtime_real_models.json")
    builds = ("cpu", "cpu@0", "alternating", "heavy on cpu@1")

    def per_crossing(m: dict, total_ms: float) -> float:
        """Microseconds of ``total_ms`` for each of the alternating build's crossings."""
        return total_ms * 1e3 / (m["alternating"]["units"] - 1)

    out = [
        (name, m["operators"], ms(m["ort_ms"]), ms(m["cpu"]["ms"]), ms(m["cpu@0"]["ms"]),
         m["alternating"]["units"], ms(m["alternating"]["ms"]),
         f"{per_crossing(m, m['alternating']['ms'] - m['cpu@0']['ms']):.0f}",
         f"{per_crossing(m, m['alternating']['gaps_ms']):.1f}",
         ratio(m["cpu"]["ms"], m["ort_ms"]), max(m[k]["rel_err"] for k in builds))
        for name, m in data.items() if name != "meta"
    ]  # fmt: skip
    return titled(
        "runtime_real_models.json", data,
        ("model", "operators", "ORT ms", "cpu ms", "cpu@0 ms", "alternating units",
         "alternating ms", "us a crossing", "us between steps", "cpu / ORT", "largest error"),
        out,
    )  # fmt: skip


def cluster() -> str:
    """``benchmarks/cluster/``: transfers between workers against raw TCP, on shaped links."""
    loop = load("cluster.json")
    shaped = load("cluster_shaped.json")
    out = [
        (f"{r['bytes'] // 1024} KiB", ms(r["raw_tcp_s"], seconds=True),
         ms(r["worker_to_worker_s"], seconds=True), share(r["raw_tcp_s"], r["worker_to_worker_s"]))
        for r in loop["transfers"]
    ]  # fmt: skip
    links = [
        (f"{r['mbps']:.0f}", f"{r['bytes'] // 1024} KiB", ms(r["raw_s"], seconds=True),
         ms(r["link_s"], seconds=True), share(r["raw_s"], r["link_s"]))
        for r in shaped["rows"]
    ]  # fmt: skip
    return titled(
        "cluster.json", loop,
        ("tensor", "raw TCP ms", "worker to worker ms", "of raw TCP's rate"),
        out,
        source("cluster_shaped.json", shaped).line(),
        "",
        table(("link Mbit/s", "tensor", "raw ms", "worker to worker ms", "of raw's rate"), links),
    )  # fmt: skip


def uploads() -> str:
    """``benchmarks/cluster/uploads.py``: a library to a worker, ours against TVM RPC's."""
    data = load("uploads.json")
    what = {
        "tvm_rpc_upload": "TVM RPC's upload",
        "ours_sent": "data port, bytes new to the worker",
        "ours_kept": "data port, bytes the worker kept",
    }
    rpc = next(r["median_s"] for r in data["rows"] if r["method"] == "tvm_rpc_upload")
    rows = [
        (what[r["method"]], ms(r["median_s"], seconds=True),
         None if r["method"] == "ours_kept" else f"{r['mib_per_s']:.0f}",  # nothing moved
         ratio(rpc, r["median_s"]))
        for r in data["rows"]
    ]  # fmt: skip
    header = (f"{data['bytes'] >> 20} MiB library", "median ms", "MiB/s", "TVM RPC's time / it")
    return titled("uploads.json", data, header, rows)


SECTIONS = {
    "runtime-programs": runtime_programs,
    "runtime-real-models": runtime_real_models,
    "cluster": cluster,
    "uploads": uploads,
}
