"""Report sections of the single-device CPU kernels, each beside ONNX Runtime on the same
inputs and threads."""

from __future__ import annotations

from markdown import bullets, median, ms, ratio, table
from sources import cpu_name, latest, latest_by_cpu, load, source, titled


def corpus(name: str = "models.json") -> str:
    """``benchmarks/models/corpus.py``: every exported model against ONNX Runtime."""
    data = load(name)
    ok = [r for r in data["rows"] if r["stage"] == "ok"]
    ratios = [r["ratio"] for r in ok]
    out = [
        (r["model"], r["source"], f"{r['compile_s']:.1f}", ms(r["tvm_ms"]), ms(r["ort_ms"]),
         f"{r['ratio']:.2f}x")
        for r in sorted(ok, key=lambda r: r["ratio"])
    ]  # fmt: skip
    return "\n".join([
        source(name, data).line(), "",
        bullets([
            f"{len(ok)} of {len(data['rows'])} models import, compile and match ONNX Runtime "
            f"(relative error under {data['tolerance']}){_by_float64(ok)}.",
            f"Our time over ONNX Runtime's: median {median(ratios):.2f}x; "
            f"{sum(x <= 1 for x in ratios)} at or below 1.00x, "
            f"{sum(x > 1.3 for x in ratios)} above 1.30x, {sum(x > 2 for x in ratios)} above "
            f"2.00x; the slowest compile {max(r['compile_s'] for r in ok):.0f} s.",
        ]),
        "",
        table(("model", "from", "compile s", "TVM ms", "ORT ms", "time / ORT"), out),
    ])  # fmt: skip


def live_weights() -> str:
    """``benchmarks/models/live_weights.py``: the corpus models whose initialisation hid
    layers, checked again with live weights."""
    data = load("corpus_live_weights.json")
    rows = data["rows"]
    matched = [r for r in rows if r["stage"] == "time"]
    out = [
        (r["model"], str(len(r["drawn"])), _kinds(r["drawn"]),
         f"{r['rel_err']:.1e}" if "rel_err" in r else "-",
         "matches" if r["stage"] == "time" else f"fails at {r['stage']}")
        for r in rows
    ]  # fmt: skip
    return "\n".join([
        source("corpus_live_weights.json", data).line(), "",
        bullets([f"{len(matched)} of {len(rows)} models match ONNX Runtime with live weights "
                 "(relative error under 1e-3)."]),
        "",
        table(("model", "drawn again", "e.g.", "rel. error", "result"), out),
    ])  # fmt: skip


def live_weights_timed() -> str:
    """``benchmarks/models/live_weights.py --timed``: the weights as built and live, ours and
    ONNX Runtime's time on each."""
    rows = list(latest(load("corpus_live_weights_timed.jsonl"), "model").values())
    out = [
        (r["model"], ms(r["ours_built_ms"]), ms(r["ort_built_ms"]), ms(r["ort_zeroed_ms"]),
         ratio(r["ours_built_ms"], r["ort_built_ms"]), ms(r["ours_live_ms"]),
         ms(r["ort_live_ms"]), ratio(r["ours_live_ms"], r["ort_live_ms"]))
        for r in rows
    ]  # fmt: skip
    header = ("model", "built: ours ms", "ORT ms", "ORT, denormals 0", "ours / ORT",
              "live: ours ms", "ORT ms", "ours / ORT")  # fmt: skip
    return titled("corpus_live_weights_timed.jsonl", rows, header, out)


def _kinds(names: list[str]) -> str:
    """The first three distinct kinds of parameter among ``names``: the last part of a name,
    with the part before it where the last is generic (``layer1.0.bn3.weight``: ``bn3.weight``;
    ``features.1.0.layer_scale``: ``layer_scale``)."""
    kinds = []
    for name in names:
        parts = [p for p in name.split(".") if not p.isdigit()]
        generic = parts[-1] in ("weight", "gamma", "scale") and len(parts) > 1
        kinds.append(".".join(parts[-2:]) if generic else parts[-1])
    kinds = list(dict.fromkeys(kinds))
    return ", ".join(kinds[:3]) + (", ..." if len(kinds) > 3 else "")


def compile_time() -> str:
    """``benchmarks/models/compile_time.py``: compile time with constants folded a round in one
    build, against TVM's folding alone and ONNX Runtime's session creation."""
    rows = list(latest(load("compile_time.jsonl"), "model").values())
    out = [
        (r["model"], r["source"], f"{r['before_s']:.1f}", f"{r['now_s']:.1f}",
         ratio(r["now_s"], r["before_s"]), f"{r['ort_s']:.2f}", ratio(r["now_s"], r["ort_s"]))
        for r in rows
    ]  # fmt: skip
    header = ("model", "from", "before s", "now s", "now / before", "ORT session s",
              "now / ORT")  # fmt: skip
    return titled("compile_time.jsonl", rows, header, out)


def layers_alone() -> str:
    """``benchmarks/models/layers_alone.py``: a model's convolutions alone, summed, against the
    whole model, ours and ONNX Runtime's."""
    rows = list(latest(load("layers_alone.jsonl"), lambda r: (r["model"], r["threads"])).values())
    out = [
        (r["model"], str(r["threads"]), ms(r["layers_ours_ms"]), ms(r["layers_ort_ms"]),
         ratio(r["layers_ours_ms"], r["layers_ort_ms"]), ms(r["whole_ours_ms"]),
         ms(r["whole_ort_ms"]), ratio(r["whole_ours_ms"], r["whole_ort_ms"]))
        for r in rows
    ]  # fmt: skip
    header = ("model", "threads", "convolutions alone ms", "ORT ms", "ours / ORT", "whole ms",
              "ORT ms", "ours / ORT")  # fmt: skip
    return titled("layers_alone.jsonl", rows, header, out)


def blocked_channels() -> str:
    """``benchmarks/models/blocked_channels.py``: NCHW against a prototype of blocked channels."""
    keyed = [{**r, "key": (r["case"], r.get("vectors", 2))} for r in load("blocked_channels.jsonl")]
    rows = list(latest(keyed, "key").values())
    out = [
        (r["case"], r["key"][1], ms(r["nchw_ms"]), ms(r["blocked_ms"]), ms(r["ort_ms"]),
         ratio(r["nchw_ms"], r["ort_ms"]), ratio(r["blocked_ms"], r["ort_ms"]))
        for r in rows
    ]  # fmt: skip
    header = ("case", "vectors", "NCHW ms", "blocked ms", "ORT ms", "NCHW / ORT",
              "blocked / ORT")  # fmt: skip
    return titled("blocked_channels.jsonl", rows, header, out)


def cpu_kernels() -> str:
    """``benchmarks/cpu_kernels/bench.py``: operators and small models, rules and ORT."""
    data = load("cpu_kernels_prepacked.json")
    out = [
        (r["name"], ms(r["default"]), ms(r["rules"]), ms(r["onnxruntime"]),
         ms(r.get("numpy")), ratio(r["rules"], r["onnxruntime"]),
         ratio(r["rules"], r.get("numpy")))
        for r in data["ops"] + data["models"]
    ]  # fmt: skip
    meta = data["meta_of"]["ops"]
    return titled(
        "cpu_kernels_prepacked.json", meta,
        ("workload", "TVM default ms", "rules ms", "ORT ms", "numpy ms", "rules / ORT",
         "rules / numpy"),
        out,
    )  # fmt: skip


def recurrent() -> str:
    """``benchmarks/cpu_kernels/recurrent.py``: recurrent layers as loop kernels."""
    rows = list(latest(load("recurrent.jsonl"), "model").values())
    out = [
        (r["model"], ms(r["unrolled_ms"]), ms(r["loop_ms"]), ms(r["ort_ms"]),
         ratio(r["loop_ms"], r["ort_ms"]), f"{r['unrolled_compile_s']:.1f}",
         f"{r['loop_compile_s']:.1f}")
        for r in rows
    ]  # fmt: skip
    return titled(
        "recurrent.jsonl", rows,
        ("model", "unrolled ms", "loop ms", "ORT ms", "loop / ORT", "unrolled compile s",
         "loop compile s"),
        out,
    )  # fmt: skip


def convolutions_1d() -> str:
    """``benchmarks/cpu_kernels/convolutions_1d.py``: 1-D and grouped kernels, before and now."""
    rows = load("convolutions_1d.jsonl")
    by = {(r["case"], r["build"]): r for r in rows}
    out = [
        (case, ms(by[case, "before"]["ours_ms"]), ms(r["ours_ms"]), ms(r["ort_ms"]),
         ratio(r["ours_ms"], r["ort_ms"]))
        for (case, build), r in by.items() if build == "now"
    ]  # fmt: skip
    return titled(
        "convolutions_1d.jsonl", rows,
        ("kernel", "before ms", "now ms", "ORT ms", "now / ORT"),
        out,
    )  # fmt: skip


def norms() -> str:
    """``benchmarks/cpu_kernels/norms.py``: normalisations over large groups."""
    rows = [r for r in latest(load("norms.jsonl"), "case").values() if "ort_ms" in r]
    out = [
        (r["case"], ms(r["ours_ms"]), ms(r["ort_ms"]), ratio(r["ours_ms"], r["ort_ms"]))
        for r in rows
    ]
    return titled(
        "norms.jsonl", rows,
        ("normalisation", "ours ms", "ORT ms", "ours / ORT"),
        out,
    )  # fmt: skip


def broadcast_add() -> str:
    """``benchmarks/cpu_kernels/broadcast_add.py``: element-wise kernels on odd widths."""
    data = load("broadcast_add.json")
    out = [
        (r["width"], ms(r["default_us"]), ms(r["rules_us"]), ms(r["ort_us"]),
         ratio(r["rules_us"], r["ort_us"]))
        for r in data["rows"]
    ]  # fmt: skip
    return titled(
        "broadcast_add.json", data,
        ("width", "default us", "rules us", "ORT us", "rules / ORT"),
        out,
    )  # fmt: skip


def gemv() -> str:
    """``benchmarks/cpu_kernels/gemv.py``: batch-1 dense layers against the memory bound."""
    data = load("gemv.json")
    out = [
        (f"{r['k']} x {r['n']}", ms(r["bound_us"]), ms(r["default_us"]), ms(r["rules_us"]),
         ms(r["ort_us"]), ratio(r["rules_us"], r["ort_us"]))
        for r in data["rows"]
    ]  # fmt: skip
    return titled(
        "gemv.json", data,
        ("K x N", "bound us", "default us", "rules us", "ORT us", "rules / ORT"),
        out,
    )  # fmt: skip


def conv_tiles() -> str:
    """``benchmarks/cpu_kernels/conv_tiles.py``: the rule's register tile among the others."""
    data = load("conv_tiles.json")
    rule = [r for r in data["rows"] if r["rule"]]
    out = [
        (
            r["conv"],
            "x".join(map(str, r["tile"])),
            ms(r["us"]),
            ms(r["ort_us"]),
            ratio(r["us"], r["ort_us"]),
        )
        for r in rule
    ]
    return titled(
        "conv_tiles.json", data,
        ("convolution", "rule's tile", "us", "ORT us", "ours / ORT"),
        out,
    )  # fmt: skip


def narrow_convs() -> str:
    """``benchmarks/cpu_kernels/narrow_convs.py``: rows of one to three columns."""
    data = load("narrow_convs.json")
    out = [
        (r["conv"], r["target"], ms(r["before_us"]), ms(r["us"]), ms(r["ort_us"]),
         ratio(r["us"], r["ort_us"]))
        for r in data["rows"]
    ]  # fmt: skip
    models = [
        (m["model"], ms(m["before"]["tvm_ms"]), ms(m["now"]["tvm_ms"]), ms(m["now"]["ort_ms"]),
         ratio(m["now"]["tvm_ms"], m["now"]["ort_ms"]))
        for m in data["models"]
    ]  # fmt: skip
    return titled(
        "narrow_convs.json", data,
        ("convolution", "target", "before us", "now us", "ORT us", "now / ORT"),
        out,
        table(("model at 64 pixels", "before ms", "now ms", "ORT ms", "now / ORT"), models),
    )  # fmt: skip


def conv_rows() -> str:
    """``benchmarks/cpu_kernels/conv_rows.py``: convolutions padded to the 4 x 2 tile."""
    data = load("conv_rows.json")
    out = [
        (r["conv"], "x".join(map(str, r["output"])), ms(r["before_us"]), ms(r["now_us"]),
         ms(r["ort_us"]), ratio(r["before_us"], r["now_us"]), ratio(r["now_us"], r["ort_us"]))
        for r in data["rows"]
    ]  # fmt: skip
    return titled(
        "conv_rows.json", data,
        ("convolution", "output", "before us", "now us", "ORT us", "speed-up", "now / ORT"),
        out,
        f"- {data['threads']} thread(s), medians of {data['rounds']} interleaved rounds; before: "
        "widths padded to whole vectors only, the reduction never cut in blocks.",
    )  # fmt: skip


def _two_kernels(file: str, name: str, before: tuple[str, str], now: tuple[str, str],
                 note: str) -> str:  # fmt: skip
    """A results file of kernels timed two ways beside ONNX Runtime (``conv``, ``before``'s and
    ``now``'s fields and ``ort_us`` a row): each way, ONNX Runtime, the speed-up and now over
    ONNX Runtime (a row without a ``now`` time keeps ``before``'s kernel)."""
    data = load(file)
    (old, old_head), (new, new_head) = before, now
    out = [
        (r["conv"], ms(r[old]), ms(r[new]), ms(r["ort_us"]), ratio(r[old], r[new]),
         ratio(r[new] or r[old], r["ort_us"]))
        for r in data["rows"]
    ]  # fmt: skip
    return titled(
        file, data, (name, old_head, new_head, "ORT us", "speed-up", "now / ORT"), out,
        f"- {data['threads']} thread(s), target `{data['target']}`, medians of {data['rounds']} "
        f"interleaved rounds; {note}",
    )  # fmt: skip


def pointwise() -> str:
    """``benchmarks/cpu_kernels/pointwise.py``: 1x1 convolutions, panel copies, 8-row tiles."""
    return _two_kernels(
        "pointwise.json", "1x1 convolution", ("before_us", "before us"), ("now_us", "now us"),
        "before: no panel copy, 4-row tiles.",
    )  # fmt: skip


def narrow_vectors() -> str:
    """``benchmarks/cpu_kernels/narrow_vectors.py``: 7- and 8-wide rows in vectors of 8."""
    return _two_kernels(
        "narrow_vectors.json", "convolution", ("whole_us", "16 lanes us"),
        ("halved_us", "8 lanes us"),
        "the rule's kernel alone (the strided 1x1 is the convolution rule's: "
        "`SubsampleStridedPointwise` now gives it to the matmul rule).",
    )  # fmt: skip


def grouped_convs() -> str:
    """``benchmarks/cpu_kernels/grouped_convs.py``: groups a vector of channels fills."""
    return _two_kernels(
        "grouped_convs.json", "convolution", ("by_group_us", "by group us"),
        ("channels_us", "channels us"),
        "each kernel alone, as a build makes it (weights packed).",
    )  # fmt: skip


def wide_channel_vectors() -> str:
    """``benchmarks/cpu_kernels/wide_channel_vectors.py``: AVX-512 channel vectors up to 56."""
    return _two_kernels(
        "wide_channel_vectors.json", "convolution", ("width_us", "width us"),
        ("channels_us", "channels us"),
        "each kernel alone, as a build makes it; no channels time: the rule keeps the width "
        "tile there.",
    )  # fmt: skip


def padded_channel_vectors() -> str:
    """``benchmarks/cpu_kernels/padded_channel_vectors.py``: a few columns for channel vectors."""
    return _two_kernels(
        "padded_channel_vectors.json", "convolution", ("width_us", "width us"),
        ("channels_us", "channels us"),
        "each kernel alone with its crop, as a build makes it.",
    )  # fmt: skip


def _before_and_now(results: str, case: str) -> str:
    """A ``record_cases`` results file (``before_and_now.py``): the latest row of each case
    (of each kind of CPU, named in a column where the file holds more than one), before, now
    and ONNX Runtime."""
    rows, cpus = latest_by_cpu(load(results), lambda r: r["case"])
    out = [
        (r["case"], *([cpu_name(r["host"])] if cpus else []), ms(r["before_ms"]),
         ms(r["now_ms"]), ms(r["ort_ms"]), ratio(r["now_ms"], r["ort_ms"]))
        for r in rows
    ]  # fmt: skip
    header = (case, *(["CPU"] if cpus else []), "before ms", "now ms", "ORT ms", "now / ORT")
    return titled(results, rows, header, out)


def softmax() -> str:
    """``benchmarks/cpu_kernels/softmax.py``: attention rows reduced in vector lanes."""
    return _before_and_now("softmax.jsonl", "softmax")


def softmax_over_tokens() -> str:
    """``benchmarks/cpu_kernels/softmax_over_tokens.py``: each column reduced once."""
    return _before_and_now("softmax_over_tokens.jsonl", "softmax")


def whole_rows() -> str:
    """``benchmarks/cpu_kernels/whole_rows.py``: row tiles over every panel."""
    return _before_and_now("whole_rows.jsonl", "kernel")


def symbolic_rows() -> str:
    """``benchmarks/cpu_kernels/symbolic_rows.py``: routed rows padded to whole tiles."""
    return _before_and_now("symbolic_rows.jsonl", "routed rows @ weights")


def loop_buffers() -> str:
    """``benchmarks/cpu_kernels/loop_buffers.py``: buffers inside loops on the stack."""
    return _before_and_now("loop_buffers.jsonl", "kernel")


def grid_samples() -> str:
    """``benchmarks/cpu_kernels/grid_samples.py``: bilinear grid samples, TVM's kernel and
    ``GridSampleTaps``'."""
    return _before_and_now("grid_samples.jsonl", "sample (image, points)")


def winograd_rows() -> str:
    """``benchmarks/cpu_kernels/winograd_rows.py``: Winograd's tiles back as maps, tiled along
    the columns or in rows of channel vectors."""
    return _before_and_now("winograd_rows.jsonl", "layer (channels @map)")


def next_panels() -> str:
    """``benchmarks/cpu_kernels/next_panels.py``: layers whose weights stream from beyond L2,
    each thread asking for its next panel or not."""
    return _before_and_now("next_panels.jsonl", "layers (widths @positions)")


def transposed_convolutions() -> str:
    """``benchmarks/cpu_kernels/transposed_convolutions.py``: up-convolutions without overlap,
    TVM's legalization and ``TransposedConvolutionsAsPointwise``."""
    return _before_and_now("transposed_convolutions.jsonl", "up-convolution (channels @map)")


def resize() -> str:
    """``benchmarks/cpu_kernels/resize.py``: bilinear resizes, TVM's kernel and two passes."""
    return _before_and_now("resize.jsonl", "resize (channels @in -> out)")


def strided_depthwise() -> str:
    """``benchmarks/cpu_kernels/strided_depthwise.py``: a lane a column, or the columns after."""
    return _before_and_now("strided_depthwise.jsonl", "depthwise, stride 2 (channels @in)")


def transposes() -> str:
    """``benchmarks/cpu_kernels/transposes.py``: a vector of columns, or square tiles."""
    return _before_and_now("transposes.jsonl", "transpose (channels @side)")


def channel_tiles() -> str:
    """``benchmarks/cpu_kernels/channel_tiles.py``: two vectors of channels a tile, or one."""
    return _before_and_now("channel_tiles.jsonl", "convolution (in->out @map)")


def depth_blocks() -> str:
    """``benchmarks/cpu_kernels/depth_blocks.py``: panels summed in blocks of their depth."""
    return _before_and_now("depth_blocks.jsonl", "1x1 convolutions (in->out @side)")


def transposed_writes() -> str:
    """``benchmarks/cpu_kernels/transposed_writes.py``: a vector of positions a channel."""
    return _before_and_now("transposed_writes.jsonl", "1x1 convolutions (in->out @side)")


def winograd() -> str:
    """``benchmarks/cpu_kernels/winograd.py``: the convolution rule's kernel, or F(4x4, 3x3)."""
    return _before_and_now("winograd.jsonl", "3x3 convolution (in -> out @side)")


def depthwise_channel_vectors() -> str:
    """``benchmarks/cpu_kernels/depthwise_channel_vectors.py``: a vector of channels a position."""
    return _before_and_now("depthwise_channel_vectors.jsonl", "depthwise (channels @in /stride)")


def max_pools() -> str:
    """``benchmarks/cpu_kernels/max_pools.py``: rows, then columns."""
    return _before_and_now("max_pools.jsonl", "max pool (channels @in)")


def small_map_pointwise() -> str:
    """``benchmarks/cpu_kernels/pointwise_layers.py columns``: output channels as columns."""
    return _before_and_now("small_map_pointwise.jsonl", "1x1 convolution (in->out @side)")


def pointwise_blocks() -> str:
    """``benchmarks/cpu_kernels/pointwise_layers.py blocks``: row tiles over small panels."""
    return _before_and_now("pointwise_blocks.jsonl", "1x1 convolution (in->out @side)")


def wide_outputs() -> str:
    """``benchmarks/cpu_kernels/wide_outputs.py``: row tiles over packed panels in L2."""
    return _before_and_now("wide_outputs.jsonl", "matmul (M x K @ K x N)")


def pointwise_groups() -> str:
    """``benchmarks/cpu_kernels/pointwise_layers.py groups``: row tiles shared by the threads."""
    return _before_and_now("pointwise_groups.jsonl", "1x1 convolution (in->out @side)")


def panel_layouts() -> str:
    """``benchmarks/cpu_kernels/pointwise_layers.py panels``: a map as wide as a panel."""
    return _before_and_now("panel_layouts.jsonl", "1x1 convolution (in->out @side)")


def widened_channels() -> str:
    """``benchmarks/cpu_kernels/pointwise_layers.py widened``: channels two vectors wide."""
    return _before_and_now("widened_channels.jsonl", "1x1 convolution (in->out @side)")


def row_tiles() -> str:
    """``benchmarks/cpu_kernels/row_tiles.py``: 12-row register tiles with AVX-512."""
    return _before_and_now("row_tiles.jsonl", "matmul (M x K @ K x N)")


def wider_tiles() -> str:
    """``benchmarks/cpu_kernels/pointwise_layers.py wider``: output channels as columns."""
    return _before_and_now("wider_tiles.jsonl", "1x1 convolution (in->out @side)")


def wide_conv_tiles() -> str:
    """``benchmarks/cpu_kernels/wide_conv_tiles.py``: 8 x 2 convolution tiles with AVX-512."""
    return _before_and_now("wide_conv_tiles.jsonl", "convolution")


def channel_tiles_along_rows() -> str:
    """``benchmarks/cpu_kernels/channel_tiles_along_rows.py``: 1 x 7 channel tiles."""
    return _before_and_now("channel_tiles_along_rows.jsonl", "convolution")


def phase_ordered_copies() -> str:
    """``benchmarks/cpu_kernels/phase_ordered_copies.py``: the phase copy in its written order."""
    return _before_and_now("phase_ordered_copies.jsonl", "convolution")


def row_bands() -> str:
    """``benchmarks/cpu_kernels/row_bands.py``: convolution threads over bands of rows."""
    return _before_and_now("row_bands.jsonl", "convolution")


def row_tile_tasks() -> str:
    """``benchmarks/cpu_kernels/row_tile_tasks.py``: strided convolutions padded in tasks."""
    return _before_and_now("row_tile_tasks.jsonl", "convolution")


def row_tile_tasks_in_models() -> str:
    """``before_and_now.py ... --off ...conv:ROW_TILE_TASKS=False``: tasks of a row tile that
    pad their rows, and a pass that pads the whole input."""
    return _switched("ROW_TILE_TASKS")


def row_tile_overlap_in_models() -> str:
    """``before_and_now.py ... --off ...conv:ROW_TILE_TASK_OVERLAP=1.25``: tiles of one row
    that pad their rows in their tasks too, and not."""
    return _switched("ROW_TILE_TASK_OVERLAP")


def tall_row_tiles() -> str:
    """``benchmarks/cpu_kernels/pointwise_layers.py tall``: tiles of 13 positions."""
    return _before_and_now("tall_row_tiles.jsonl", "1x1 convolution (in->out @side)")


def tall_inputs() -> str:
    """``benchmarks/cpu_kernels/tall_inputs.py``: blocks of panels where ``A`` is large."""
    return _before_and_now("tall_inputs.jsonl", "matmul (M x K @ K x N)")


def concatenations() -> str:
    """``benchmarks/cpu_kernels/concatenations.py``: a block per input (the pieces rule)."""
    return _before_and_now("concatenations.jsonl", "concatenation")


def kernels_in_order() -> str:
    """``benchmarks/models/kernels_inside.py``: kernels alone, in the model's order, whole."""
    rows = list(latest(load("kernels_inside.jsonl"), "model").values())
    out = [
        (r["model"], r["kernels"], ms(r["alone_us"] / 1e3), ms(r["in_order_us"] / 1e3),
         ms(r["whole_us"] / 1e3), ms(r["ort_whole_us"] / 1e3),
         ratio(r["alone_us"], r["ort_whole_us"]), ratio(r["whole_us"], r["ort_whole_us"]))
        for r in rows
    ]  # fmt: skip
    header = ("model", "kernels", "alone ms", "in order ms", "whole ms", "ORT ms",
              "alone / ORT", "whole / ORT")  # fmt: skip
    return titled("kernels_inside.jsonl", rows, header, out)


def _switched(switch: str) -> str:
    """``before_and_now.py``'s whole models with one change (``--off`` naming ``switch``) and
    without it, the latest row of each model."""
    rows = [r for r in load("before_and_now.jsonl") if any(f":{switch}=" in o for o in r["off"])]
    rows = list(latest(rows, "model").values())
    out = [
        (r["model"], ms(r["before_ms"]), ms(r["now_ms"]), ms(r["ort_ms"]),
         ratio(r["now_ms"], r["ort_ms"]))
        for r in rows
    ]  # fmt: skip
    header = ("model", "before ms", "now ms", "ORT ms", "now / ORT")
    return titled("before_and_now.jsonl", rows, header, out)


def paired_replay() -> str:
    """``benchmarks/models/paired_replay.py``: a change inside whole models, replayed turn by
    turn beside ONNX Runtime; the latest row of each model and change."""
    rows, cpus = latest_by_cpu(load("paired_replay.jsonl"), lambda r: (r["model"], *r["off"]))

    def change(row: dict) -> str:
        return "; ".join(o.rpartition(":")[2] for o in row["off"])

    def turns(row: dict) -> str:
        low, high = row["quartiles"]
        return f"{row['now_over_before']:.3f} ({low:.3f}-{high:.3f})"

    def picked(row: dict) -> str | None:
        value = row.get("only_now_over_before")
        return None if value is None else f"{value:.3f}"

    out = [
        (r["model"], *([cpu_name(r["host"])] if cpus else []), change(r), f"{r['before_us']:.0f}",
         f"{r['now_us']:.0f}", turns(r), picked(r), f"{r['ort_us']:.0f}",
         ratio(r["now_us"], r["ort_us"]))
        for r in rows
    ]  # fmt: skip
    header = ("model", *(["CPU"] if cpus else []), "before: set", "before us", "now us",
              "now / before (quartiles)", "--only now / before", "ORT us", "now / ORT")  # fmt: skip
    notes = (
        "- Medians over the turns; a ratio below 1.000: the change made the model's kernels "
        "faster. `now / ORT`: our replay with the change over ONNX Runtime's whole run.",
    )
    return titled("paired_replay.jsonl", rows, header, out, *notes)


def columns_in_lanes_models() -> str:
    """``before_and_now.py ... --off ...reduction:COLUMNS_IN_LANES=False --off
    ...reduction:recomputed=...``: models with normalisations, the reduction rule of v61 and
    of v60."""
    return _switched("COLUMNS_IN_LANES")


def depthwise_rows() -> str:
    """``benchmarks/cpu_kernels/depthwise_rows.py``: depthwise rows of one vector tiled."""
    return _before_and_now("depthwise_rows.jsonl", "kernel")


def depthwise_rows_in_models() -> str:
    """``before_and_now.py ... --off ...conv:DEPTHWISE_ROWS_MIN_VECTORS=2``: mobile networks
    with depthwise rows of one vector tiled, and not."""
    return _switched("DEPTHWISE_ROWS_MIN_VECTORS")


def shuffled_stride_widths() -> str:
    """``benchmarks/cpu_kernels/shuffled_stride_widths.py``: strided depthwise and grouped
    convolutions widened to whole vectors."""
    return _before_and_now("shuffled_stride_widths.jsonl", "kernel")


def blocked_copies() -> str:
    """``benchmarks/cpu_kernels/blocked_copies.py``: channel tiles' planar reads and writes
    as blocked copies by register transposes."""
    return _before_and_now("blocked_copies.jsonl", "convolution")


def blocked_copies_in_models() -> str:
    """``before_and_now.py ... --off ...conv:BLOCKED_COPIES=False``: mobile and grouped
    networks with the channel tiles' blocked copies, and without."""
    return _switched("BLOCKED_COPIES")


def depthwise_threads() -> str:
    """``benchmarks/cpu_kernels/depthwise_threads.py``: small depthwise convolutions on both
    threads."""
    return _before_and_now("depthwise_threads.jsonl", "convolution")


def depthwise_threads_in_models() -> str:
    """``before_and_now.py ... --off ...conv:DEPTHWISE_PARALLEL_MIN_FLOPS=262144``: mobile
    networks with small depthwise layers on both threads, and on one."""
    return _switched("DEPTHWISE_PARALLEL_MIN_FLOPS")


def masked_stores() -> str:
    """``benchmarks/cpu_kernels/masked_stores.py``: cropped write-backs computed as whole
    vectors and stored under a mask."""
    return _before_and_now("masked_stores.jsonl", "convolution")


def masked_stores_in_models() -> str:
    """``before_and_now.py ... --off ...guarded_lanes_as_masked_stores:MASKED_STORES=False``:
    whole models with cropped write-backs stored under a mask, and without."""
    return _switched("MASKED_STORES")


def guarded_reads() -> str:
    """``benchmarks/cpu_kernels/guarded_reads.py``: padded copies a vector at a time."""
    return _before_and_now("guarded_reads.jsonl", "convolution")


def guarded_reads_in_models() -> str:
    """``before_and_now.py ... --off ...guarded_reads_as_vectors:VECTOR_READS=False``: whole
    models with their padded copies in vectors, and without."""
    return _switched("VECTOR_READS")


def padded_row_ends() -> str:
    """``benchmarks/cpu_kernels/padded_row_ends.py``: rows padded at their ends only, those
    ends as masked vectors."""
    return _before_and_now("padded_row_ends.jsonl", "convolution")


def spare_accumulators() -> str:
    """``benchmarks/cpu_kernels/spare_accumulators.py``: channel tiles of 6 positions over rows
    7 does not divide."""
    return _before_and_now("spare_accumulators.jsonl", "convolution")


def tall_windows() -> str:
    """``benchmarks/cpu_kernels/tall_windows.py``: a channel tile whose window is many rows
    tall padded in a pass of its own, not in each task."""
    return _before_and_now("tall_windows.jsonl", "convolution")


def padded_row_ends_in_models() -> str:
    """``before_and_now.py ... --off ...guarded_reads_as_vectors:MASKED_EDGES=False``: whole
    models with the padded ends of their copies as masked vectors, and lane by lane."""
    return _switched("MASKED_EDGES")


def shuffled_stride_widths_in_models() -> str:
    """``before_and_now.py ... --off ...pad_convolution_outputs:SHUFFLED_STRIDES=False``:
    mobile networks with strided depthwise layers widened to whole vectors, and not."""
    return _switched("SHUFFLED_STRIDES")


def register_tiles_on_the_stack() -> str:
    """``before_and_now.py ... --off ...stack_loop_buffers:LOCAL_BUFFERS=False --off
    ...stack_loop_buffers:buffer_bytes=...``: loop buffers of every scope and every lane on the
    stack, and only ``global`` ones counted by one lane."""
    return _switched("LOCAL_BUFFERS")


def bands_of_the_larger_operand() -> str:
    """``before_and_now.py ... --off ...common:SPLIT_LARGER=False``: matmul threads on bands
    of the larger operand, and not."""
    return _switched("SPLIT_LARGER")


def bands_of_rows_in_models() -> str:
    """``before_and_now.py ... --off ...conv:ROWS_BEFORE_CHANNELS=False``: convolution
    threads over bands of rows where the input outweighs the weights, and not."""
    return _switched("ROWS_BEFORE_CHANNELS")


def one_panel_bands() -> str:
    """``before_and_now.py ... --off ...matmul:ONE_PANEL_BANDS=False``: a band of rows a
    thread where each thread has one panel, and not."""
    return _switched("ONE_PANEL_BANDS")


def tall_tiles_in_models() -> str:
    """``before_and_now.py ... --off ...matmul:TALL_ROW_TILES=False --off
    ...pad_matmul_columns:PART_VECTOR_CHANNELS=False``: tiles of 9-14 rows, and not."""
    return _switched("TALL_ROW_TILES")


def prefetched_panel_blocks() -> str:
    """``before_and_now.py ... --off ...prefetch_panel_blocks:LINES_PER_TILE=0``: the next
    depth block of a panel prefetched, and not."""
    return _switched("LINES_PER_TILE")


def pads_in_pieces() -> str:
    """``before_and_now.py ... --off ...pieces:ACROSS_AXES=False``: pads over two axes in
    pieces, and as one block."""
    return _switched("ACROSS_AXES")


def copies_in_task() -> str:
    """``before_and_now.py ... --off ...conv:CHANNEL_TILE_COPIES_IN_TASK=False``: the
    channel tile's padding in its tasks, and in a pass of its own."""
    return _switched("CHANNEL_TILE_COPIES_IN_TASK")


def channel_write_back() -> str:
    """``benchmarks/cpu_kernels/channel_write_back.py``: a channel tile one position wide
    written back a vector of channels at a time, or along the width."""
    return _before_and_now("channel_write_back.jsonl", "convolution and activation")


def channel_write_back_models() -> str:
    """``before_and_now.py ... --off ...conv:CHANNEL_VECTOR_WRITE_BACK=False``: whole models
    with the channel tile written back a vector of channels at a time, and along the width."""
    return _switched("CHANNEL_VECTOR_WRITE_BACK")


def channel_write_back_wide() -> str:
    """``benchmarks/cpu_kernels/channel_write_back_wide.py``: a channel tile a row wide
    written back a vector of channels at a time, or along the row."""
    return _before_and_now("channel_write_back_wide.jsonl", "convolution and activation")


def channel_write_back_wide_models() -> str:
    """``before_and_now.py ... --off ...conv:CHANNEL_VECTOR_WRITE_BACK_WIDE=False``: whole
    models with channel tiles a row wide written back along channels, and along the row."""
    return _switched("CHANNEL_VECTOR_WRITE_BACK_WIDE")


def padded_channels() -> str:
    """``benchmarks/cpu_kernels/padded_channels.py``: convolutions whose output channels no
    vector divides, widened to whole vectors of them and cropped, or as given."""
    return _before_and_now("padded_channels.jsonl", "convolution")


def padded_channels_models() -> str:
    """``before_and_now.py ... --off ...pad_convolution_channels:PAD_CHANNELS=False``: whole
    models with such convolutions widened, and not."""
    return _switched("PAD_CHANNELS")


def channel_blocks_in_task() -> str:
    """``benchmarks/cpu_kernels/channel_blocks_in_task.py``: channel-vectorized convolutions
    whose input outweighs their weights, every block of channels in each task, or one."""
    return _before_and_now("channel_blocks_in_task.jsonl", "convolution")


def channel_blocks_in_task_models() -> str:
    """``before_and_now.py ... --off ...conv:CHANNEL_BLOCKS_IN_TASK=False``: whole models with
    every block of channels in each task, and one."""
    return _switched("CHANNEL_BLOCKS_IN_TASK")


def temporal_convolutions() -> str:
    """``benchmarks/cpu_kernels/temporal_convolutions.py``: 3-D convolutions with a window
    along time only, as 2-D ones over (time, height x width) or as given."""
    return _before_and_now("temporal_convolutions.jsonl", "convolution")


def temporal_convolutions_models() -> str:
    """``before_and_now.py ... --off ...temporal_convolutions_as_2d:AS_2D=False``: whole
    models with such convolutions as 2-D ones, and as given."""
    return _switched("AS_2D")


def fold_constant_weights_models() -> str:
    """``before_and_now.py ... --off ...fold_constant_weights:CONVOLUTIONS=frozenset()``:
    whole models with convolution weights computed from constants folded at load, and not."""
    return _switched("CONVOLUTIONS")


def deep_panels() -> str:
    """``before_and_now.py ... --off ...matmul:DEEP_PANELS=False``: deep panels summed in
    blocks of their depth, and whole."""
    return _switched("DEEP_PANELS")


def depth_steps() -> str:
    """``before_and_now.py ... --off ...matmul:DEPTH_STEPS=1``: four rows of the depth a
    pass of the register tile, and one."""
    return _switched("DEPTH_STEPS")


def padded_rows_as_columns() -> str:
    """``before_and_now.py ... --off ...matmul:PADDED_ROWS_MAX_POSITIONS=0``: a 7 x 7 map's
    1x1 convolutions with their weights as the columns where AVX2 pads their rows, and not."""
    return _switched("PADDED_ROWS_MAX_POSITIONS")


def named_depth_steps() -> str:
    """``before_and_now.py ... --off ...matmul:NAMED_DEPTH_STEPS=False``: the depth steps for
    1x1 convolutions with their weights as the columns, and not."""
    return _switched("NAMED_DEPTH_STEPS")


def image_streams() -> str:
    """``before_and_now.py ... --off ...matmul:IMAGE_STREAMS=False``: images read in place
    summed in blocks of channels over a band a thread, and a panel at a time."""
    return _switched("IMAGE_STREAMS")


def token_bands() -> str:
    """``before_and_now.py ... --off ...matmul:TOKEN_BANDS=False``: matmul threads on bands of
    rows where the weights are small, and on panels."""
    return _switched("TOKEN_BANDS")


def uneven_token_bands() -> str:
    """``before_and_now.py ... --off ...matmul:crops_columns=lambda *_: True``: token bands
    uneven where no crop is fused, and cut only where the cores divide the row tiles."""
    return _switched("crops_columns")


def rows_of_vectors() -> str:
    """``before_and_now.py ... --off ...common:ROWS_OF_VECTORS=False``: concatenations over
    maps whose vectors would cross rows, vectorized a row at a time, and across rows."""
    return _switched("ROWS_OF_VECTORS")


def strided_reads() -> str:
    """``before_and_now.py ... --off ...conv:ROW_TILED_STEPS=(1,) --off
    ...strided_loads_as_shuffles:MAX_STRIDE=1``: strided vector reads as whole vectors and a
    shuffle, depthwise convolutions of column stride 2 on the row tile; and neither (every
    other column computed, then taken)."""
    return _switched("MAX_STRIDE")


def group_tiles() -> str:
    """``before_and_now.py ... --off ...conv:GROUP_TILES=False``: grouped convolutions whose
    groups hold whole tiles on the one-group tile, and on one vector a tile."""
    return _switched("GROUP_TILES")


def position_bands() -> str:
    """``before_and_now.py ... --off ...matmul:POSITION_BANDS=False``: 1x1 convolutions with
    their weights as the columns on bands of positions where the weights are small, and on
    panels."""
    return _switched("POSITION_BANDS")


def _under_load_latest() -> tuple[list[dict], bool]:
    """``under_load.jsonl``'s latest row of each model, load and kind of CPU
    (:func:`~sources.latest_by_cpu`)."""
    return latest_by_cpu(load("under_load.jsonl"), lambda r: (r["model"], r["duty"]))


def under_load_rows() -> list[dict]:
    """The rows of the under-load table (the summary's too)."""
    return _under_load_latest()[0]


def under_load() -> str:
    """``benchmarks/models/under_load.py``: models quiet and with another process busy on one
    core, ours and ONNX Runtime's."""
    rows, cpus = _under_load_latest()
    out = [
        (r["model"], *([cpu_name(r["host"])] if cpus else []), f"{r['load_share']:.0%}", ms(r["tvm_ms"]),
         ms(r["ort_ms"]), ratio(r["tvm_ms"], r["ort_ms"]), ms(r["tvm_loaded_ms"]),
         ms(r["ort_loaded_ms"]), ratio(r["tvm_loaded_ms"], r["ort_loaded_ms"]),
         ratio(r["tvm_loaded_ms"], r["tvm_ms"]), ratio(r["ort_loaded_ms"], r["ort_ms"]),
         ratio(r["tvm_pool_tvm_ms"], r["ort_ms"]) if "tvm_pool_tvm_ms" in r else "-",
         ratio(r["tvm_pool_tvm_loaded_ms"], r["ort_loaded_ms"])
         if "tvm_pool_tvm_loaded_ms" in r else "-")
        for r in rows
    ]  # fmt: skip
    header = ("model", *(["CPU"] if cpus else []), "load", "quiet ms", "ORT ms", "quiet / ORT", "loaded ms",
              "ORT loaded ms", "loaded / ORT", "ours slowed", "ORT slowed",
              "TVM's pool: quiet / ORT", "loaded / ORT")  # fmt: skip
    return titled("under_load.jsonl", rows, header, out)


SECTIONS = {
    "corpus": corpus,
    "corpus-avx2": lambda: corpus("models_avx2.json"),
    "corpus-added-avx2": lambda: corpus("models_added_avx2.json"),
    "corpus-zen4": lambda: corpus("models_zen4.json"),
    "corpus-added-zen4": lambda: corpus("models_added_zen4.json"),
    "corpus-added": lambda: corpus("models_added.json"),
    "corpus-outside": lambda: corpus("models_outside.json"),
    "corpus-outside-zen4": lambda: corpus("models_outside_zen4.json"),
    "under-load": under_load,
    "corpus-live-weights": live_weights,
    "corpus-live-weights-timed": live_weights_timed,
    "compile-time": compile_time,
    "paired-replay": paired_replay,
    "cpu-kernels": cpu_kernels,
    "recurrent": recurrent,
    "convolutions-1d": convolutions_1d,
    "norms": norms,
    "broadcast-add": broadcast_add,
    "gemv": gemv,
    "conv-tiles": conv_tiles,
    "conv-rows": conv_rows,
    "narrow-convs": narrow_convs,
    "pointwise": pointwise,
    "narrow-vectors": narrow_vectors,
    "grouped-convs": grouped_convs,
    "wide-channel-vectors": wide_channel_vectors,
    "padded-channel-vectors": padded_channel_vectors,
    "resize": resize,
    "grid-samples": grid_samples,
    "winograd-rows": winograd_rows,
    "transposed-convolutions": transposed_convolutions,
    "next-panels": next_panels,
    "strided-depthwise": strided_depthwise,
    "winograd": winograd,
    "depthwise-channel-vectors": depthwise_channel_vectors,
    "max-pools": max_pools,
    "small-map-pointwise": small_map_pointwise,
    "pointwise-blocks": pointwise_blocks,
    "wide-outputs": wide_outputs,
    "pointwise-groups": pointwise_groups,
    "panel-layouts": panel_layouts,
    "widened-channels": widened_channels,
    "row-tiles": row_tiles,
    "wider-tiles": wider_tiles,
    "wide-conv-tiles": wide_conv_tiles,
    "channel-tiles-along-rows": channel_tiles_along_rows,
    "phase-ordered-copies": phase_ordered_copies,
    "tall-inputs": tall_inputs,
    "concatenations": concatenations,
    "transposes": transposes,
    "softmax": softmax,
    "softmax-over-tokens": softmax_over_tokens,
    "softmax-over-tokens-models": columns_in_lanes_models,
    "whole-rows": whole_rows,
    "loop-buffers": loop_buffers,
    "symbolic-rows": symbolic_rows,
    "bands-larger": bands_of_the_larger_operand,
    "register-tiles-stack": register_tiles_on_the_stack,
    "depthwise-rows": depthwise_rows,
    "depthwise-rows-models": depthwise_rows_in_models,
    "shuffled-stride-widths": shuffled_stride_widths,
    "shuffled-stride-widths-models": shuffled_stride_widths_in_models,
    "blocked-copies": blocked_copies,
    "blocked-copies-models": blocked_copies_in_models,
    "depthwise-threads": depthwise_threads,
    "depthwise-threads-models": depthwise_threads_in_models,
    "masked-stores": masked_stores,
    "masked-stores-models": masked_stores_in_models,
    "guarded-reads": guarded_reads,
    "guarded-reads-models": guarded_reads_in_models,
    "padded-row-ends": padded_row_ends,
    "padded-row-ends-models": padded_row_ends_in_models,
    "spare-accumulators": spare_accumulators,
    "tall-windows": tall_windows,
    "prefetched-blocks": prefetched_panel_blocks,
    "row-bands": row_bands,
    "row-bands-models": bands_of_rows_in_models,
    "row-tile-tasks": row_tile_tasks,
    "row-tile-tasks-models": row_tile_tasks_in_models,
    "row-tile-overlap-models": row_tile_overlap_in_models,
    "tall-row-tiles": tall_row_tiles,
    "tall-tiles-models": tall_tiles_in_models,
    "one-panel-bands": one_panel_bands,
    "pads-in-pieces": pads_in_pieces,
    "copies-in-task": copies_in_task,
    "channel-write-back": channel_write_back,
    "channel-write-back-models": channel_write_back_models,
    "channel-write-back-wide": channel_write_back_wide,
    "fold-constant-weights-models": fold_constant_weights_models,
    "padded-channels": padded_channels,
    "padded-channels-models": padded_channels_models,
    "channel-blocks-in-task": channel_blocks_in_task,
    "channel-blocks-in-task-models": channel_blocks_in_task_models,
    "temporal-convolutions": temporal_convolutions,
    "temporal-convolutions-models": temporal_convolutions_models,
    "channel-write-back-wide-models": channel_write_back_wide_models,
    "deep-panels": deep_panels,
    "depth-steps": depth_steps,
    "padded-rows-as-columns": padded_rows_as_columns,
    "named-depth-steps": named_depth_steps,
    "image-streams": image_streams,
    "token-bands": token_bands,
    "uneven-token-bands": uneven_token_bands,
    "position-bands": position_bands,
    "group-tiles": group_tiles,
    "rows-of-vectors": rows_of_vectors,
    "strided-reads": strided_reads,
    "kernels-in-order": kernels_in_order,
    "channel-tiles": channel_tiles,
    "depth-blocks": depth_blocks,
    "transposed-writes": transposed_writes,
    "blocked-channels": blocked_channels,
    "layers-alone": layers_alone,
}


def _by_float64(ok: list[dict]) -> str:
    """The models of ``ok`` that matched torch in float64 where ONNX Runtime's output was the
    one off (``corpus.float64_errors``), as a clause ("" where none did)."""
    names = [r["model"] for r in ok if "ort_rel_err_f64" in r]
    if not names:
        return ""
    return f", or torch in float64 where ONNX Runtime's output was off ({', '.join(names)})"
