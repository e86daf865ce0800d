"""The documentation's benchmark summary: one line per benchmark, ours beside the peer."""

from __future__ import annotations

from kernels import under_load_rows
from markdown import median, table
from sources import latest, load


def _range(values: list[float]) -> str:
    return f"{min(values):.2f}x-{max(values):.2f}x, median {median(values):.2f}x"


def _corpus_row(what: str, isa: str, name: str) -> tuple[str, str, str, str]:
    """The summary's row of one corpus results file (``corpus.py --out``): its models that ran
    against ONNX Runtime, read once."""
    ratios = [r["ratio"] for r in load(name)["rows"] if r["stage"] == "ok"]
    return f"{len(ratios)} {what}, one CPU ({isa})", "ONNX Runtime", _range(ratios), name


def summary() -> str:
    """Each benchmark's time against its peer (ONNX Runtime or torch), as ranges of ratios."""
    opt = []
    for r in load("optimize.jsonl"):
        orts = [c["p50_ms"] for c in r["candidates"] if c["name"].startswith("ORT on ")]
        if orts and all(x is not None for x in orts):
            opt.append(r["kept_p50_ms"] / min(orts))
    eop = [
        m["strategies"]["eop"]["measured_ms"] / m["strategies"]["onnxruntime"]["measured_ms"]
        for m in load("eop_cores.json")["models"].values()
    ]
    duet = [
        r["duet"]["p50"] / min(r["onnxruntime"].values())
        for r in load("duet.json")["models"].values()
    ]
    edgepipe = [
        r["ort_per_s"] / r["pipelined_per_s"]
        for r in load("edgepipe_exported.json")
        if r["stage"] == "ok"
    ]
    timed = [  # runs timed with ONNX Runtime in their rounds: the latest of each cluster, model
        r for r in load("flexpie_latency.json")["runs"]
        if r.get("ort_s") and "flexpie-confirmed" in r["measured_s"]
    ]  # fmt: skip
    flexpie = [
        r["measured_s"]["flexpie-confirmed"] / r["ort_s"]
        for r in latest(timed, lambda r: (r["case"], r["model"])).values()
    ]
    pipelines = [  # time per microbatch: ONNX Runtime's rate over the cluster's
        c["ort_per_s"] / median([e["measured_per_s"] for e in c["strategies"]["edgepipe"]])
        for c in load("edgepipe_throughput.json")["cases"]
        if c.get("ort_per_s")
    ]
    gpu = load("gpu_versus_torch.jsonl")
    loaded = [r["tvm_loaded_ms"] / r["ort_loaded_ms"] for r in under_load_rows()]
    rows = [
        ("`optimize`, kept plan", "ONNX Runtime, best device", _range(opt), "optimize.jsonl"),
        _corpus_row("corpus models", "AVX-512", "models.json"),
        _corpus_row("corpus models", "AVX2", "models_avx2.json"),
        _corpus_row("corpus models", "AVX-512, Zen 4", "models_zen4.json"),
        _corpus_row("added corpus models", "AVX-512", "models_added.json"),
        _corpus_row("added corpus models", "AVX2", "models_added_avx2.json"),
        _corpus_row("added corpus models", "AVX-512, Zen 4", "models_added_zen4.json"),
        (f"{len(loaded)} corpus models, one core shared with another process", "ONNX Runtime, the same",
         _range(loaded), "under_load.jsonl"),
        ("EOP on two one-core workers", "ONNX Runtime, both cores", _range(eop), "eop_cores.json"),
        ("DUET, two zoo models", "ONNX Runtime, both cores", _range(duet), "duet.json"),
        ("EdgePipe, 12 exports (time per item)", "ONNX Runtime, both cores", _range(edgepipe),
         "edgepipe_exported.json"),
        ("EdgePipe, emulated cluster (time per item)", "ONNX Runtime, one device",
         _range(pipelines), "edgepipe_throughput.json"),
        ("FlexPie, emulated ring of four", "ONNX Runtime, one device", _range(flexpie),
         "flexpie_latency.json"),
        ("GPU, CUDA graphs", "torch eager",
         _range([r["tvm_graph_p50_ms"] / r["torch_eager_p50_ms"] for r in gpu]),
         "gpu_versus_torch.jsonl"),
        ("GPU, CUDA graphs", "torch CUDA graph",
         _range([r["tvm_graph_p50_ms"] / r["torch_cuda_graph_p50_ms"] for r in gpu]),
         "gpu_versus_torch.jsonl"),
    ]  # fmt: skip
    return "\n".join([
        table(("ours", "beside", "our time / the peer's", "results file"), rows),
        "",
        "*Above 1.00x we are slower. Each row's command, commit, host and date: its table in "
        "`benchmarks/README.md`.*",
    ])  # fmt: skip


SECTIONS = {"summary": summary}
