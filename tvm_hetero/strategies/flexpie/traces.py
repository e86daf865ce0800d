"""FlexPie's traces: measured tiles, transfers and joins that its estimators learn from.

* **compute**: the operator tiles FlexPie's schemes give the layers of some models, over
  1..``devices`` devices and fused runs of one and two layers, each compiled alone at its tile
  shape and timed on one device of every compute class (on its worker for a cluster device);
* **sync**: payloads pulled from one worker by another through the tensor link, for every
  ordered pair of a cluster's devices (along the route the cluster takes), or, for devices of
  one process, a ``to_vdevice`` copy;
* **rearrange**: tiles joined from 2 to 4 pieces (``concat`` of channels, rows or columns)
  on each compute class.

A trace is a JSON line ``{"estimator", "features", "seconds", "device", "source"}``, and for
the kernels' estimators (compute, rearrange) ``"rules"``: the CPU schedule rules' version
(:data:`~tvm_hetero.schedules.cpu.RULES_VERSION`) of the kernels it timed (none: traced before
versions were recorded). Timings go through the profile database like every other measurement
(a second collection re-uses them).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.costmodel.estimators import traced_rules
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.devices.discover import local_class
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.records import RecordKind

Progress = Callable[[str, int, int], None]
SYNC_SIZES = (1024, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 2097152, 8388608)
"""Payload bytes of the sync traces (a tile's boundary rows to a whole feature map), closest
where halos are (a row of a 14 x 14 map of 512 channels is 28 KiB): the trees price a payload
between two traced sizes as one of them (traced at 4 and 32 KiB only, every halo under 32 KiB
was priced as 4 KiB)."""
DRAIN_BYTES = 2 * 2**20
"""Bytes a receiver pulls, in payloads of the size traced, before it times them: a shaped link
lets a burst through at once when it has been idle (``tbf``: 4 ms of its traffic), which a
run's train of halo exchanges has spent (a 28 KiB piece pulled alone over 50 Mbit/s took
0.16 ms, pieces of a run 4.6 ms each). A payload is timed as a busy link carries it."""
MAX_DRAIN_PULLS = 1024
"""Pulls before the timed ones at most (the smallest payloads)."""
IDLE_MS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""Milliseconds a busy link then sits idle before each timed pull, besides none: the other side
of the shaper. A model that computes between two exchanges finds the bucket refilled by as
much (over 50 Mbit/s a 14 KiB piece took 2.4 ms on a busy link, 1.3 ms after 1 ms idle and
0.15 ms after 4 ms), and FlexPie prices each exchange with the compute before it
(``sync_row(idle_s=...)``). 16 ms refills the 16 KiB bucket of a 10 Mbit/s link."""
IDLE_MAX_BYTES = 512 * 2**10
"""Payloads traced after idle gaps at most: a larger one outlasts the 4 ms bucket of a 1 Gbit/s
link (500 KB), and an idle link saves it under a percent."""
LATER_FEATURES = {"sync": {"idle_ms": 0.0}}
"""Features added after traces were taken, with the value they had then: transfers traced
before ``idle_ms`` were timed on links busy with the same payload."""
JOIN_SHAPES = (
    (1, 8, 16, 16), (1, 16, 32, 32), (1, 32, 28, 28), (1, 64, 56, 56), (1, 24, 9, 13),
    (1, 3, 224, 224), (1, 32, 112, 112), (1, 96, 56, 56), (1, 128, 28, 28), (1, 256, 14, 14),
    (1, 512, 7, 7), (1, 48, 17, 29),
)  # fmt: skip
JOINS = tuple(
    (shape, pieces, axis) for axis in (1, 2, 3) for shape in JOIN_SHAPES for pieces in (2, 3, 4)
)
"""The joins traced, ``(shape, pieces, axis)``: channels (OutC), rows (InH) or columns (InW) of
each shape from 2 to 4 pieces. Equal bytes join at different speeds by how many contiguous runs
they copy: 3.6-4.6x apart as rows of ``(1, 32, 28, 28)`` and of ``(1, 512, 7, 7)``."""


def compute_workloads(
    models: Sequence[Model], devices: int, limit: int, seed: int = 0
) -> list[tuple[Any, Any, dict[str, float]]]:
    """Distinct operator tiles ``(call, box, features without the device's)`` of ``models``
    under every scheme on 1..``devices`` devices and runs of one and two layers; at most
    ``limit``, drawn at random, a quarter of them convolutions with rows of 1-5 columns where
    there are so many (:data:`NARROW_SHARE`)."""
    from tvm_hetero.ir.tiles import SCHEMES
    from tvm_hetero.strategies.flexpie.planner import TileGeometry, compute_row, flexpie_layers

    found: dict[tuple, tuple] = {}
    for model in models:
        layers = flexpie_layers(model)
        for count in range(1, devices + 1):
            geometry = TileGeometry(model, layers, count)
            for a in range(len(layers)):
                for d in (1, 2):
                    for scheme in SCHEMES:
                        tiles = geometry.tiles(a, d, scheme) if a + d <= len(layers) else None
                        for tile in tiles or ():
                            for call, box in tile.ops:
                                row = compute_row(call, box, {})
                                if row is not None:
                                    found.setdefault(tuple(row.values()), (call, box, row))
    chosen = list(found.values())
    random.Random(seed).shuffle(chosen)
    narrow = [c for c in chosen if is_narrow_conv(c[2])][: int(limit * NARROW_SHARE)]
    taken = {id(c) for c in narrow}
    return (narrow + [c for c in chosen if id(c) not in taken])[:limit]


NARROW_SHARE = 0.25
"""The share of a sample of tiles kept for convolutions with rows of 1-5 columns (a column or
grid tile of a small map; the convolution rule vectorizes them by output channel): about 2 %
of all tiles, too few in a uniform draw for the compute estimator to price them."""


def is_narrow_conv(row: dict[str, float]) -> bool:
    """Whether a compute row is a convolution (not 1x1 of stride 1) with rows of 1-5 columns."""
    from tvm_hetero.costmodel.estimators import narrow_convs

    return bool(narrow_convs({k: np.array([v]) for k, v in row.items()})[0])


def concat_layout(shape: Sequence[int], pieces: int, axis: int) -> dict[str, int]:
    """The layout features (:func:`~tvm_hetero.ir.tiles.join_layout`) of what
    :func:`~tvm_hetero.ir.workloads.concat_module` joins."""
    from tvm_hetero.ir import tiles

    whole = tiles.full_box(shape)
    parts = tiles.even_parts(int(shape[axis]), pieces)
    return tiles.join_layout([(*whole[:axis], p, *whole[axis + 1 :]) for p in parts], whole)


def append_traces(out: str | Path, traces: Iterable[dict]) -> int:
    """Append ``traces`` to the JSON-lines file ``out``; how many."""
    count = 0
    with Path(out).open("a") as f:
        for t in traces:
            f.write(json.dumps(t) + "\n")
            count += 1
    return count


def collect(
    models: Sequence[Model], devices: Sequence[DeviceSpec], out: str | Path,
    cluster: ClusterSpec | None = None, limit: int = 300, db: str | Path | None = None,
    options: BuildOptions | None = None, progress: Progress | None = None, seed: int = 0,
    joins: Sequence[tuple[Sequence[int], int, int]] | None = None,
) -> dict[str, int]:  # fmt: skip
    """Measure compute, sync and rearrange traces and append them to ``out`` (JSON lines);
    returns how many of each. One device per compute class is timed; ``limit=0`` times the
    transfers only (another cluster of devices already traced); ``joins``: the joins timed
    (:data:`JOINS`)."""
    from tvm_hetero.ir.workloads import concat_module, tile_op_module
    from tvm_hetero.profiling.profiler import profiler_for
    from tvm_hetero.runtime.measure import PROFILE_CONFIG, for_device
    from tvm_hetero.runtime.timer import close_runners, runners_for
    from tvm_hetero.schedules.cpu import RULES_VERSION
    from tvm_hetero.strategies.flexpie.planner import device_features

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    classes: dict[str, DeviceSpec] = {}
    for d in devices:
        classes.setdefault(local_class(d), d)
    workloads = compute_workloads(models, len(devices), limit, seed)
    counts = {"compute": 0, "sync": 0, "rearrange": 0}
    joins = (JOINS if joins is None else joins) if limit else ()
    total = len(classes) * (len(workloads) + len(joins))
    done = 0
    runners = runners_for(list(classes.values()))
    try:
        for device in classes.values():
            # a device held to a quota is timed over several CFS periods, not inside one burst
            config = for_device(PROFILE_CONFIG, device.cpu_quota)
            profiler = profiler_for(db, options, runners[device.name], config)
            rows = []
            for call, box, row in workloads:
                seconds = profiler.measure(
                    tile_op_module(call, box), device, RecordKind.OP, {"tile": row}
                ).median_s
                features = {**row, **device_features(device)}
                rows.append({"estimator": "compute", "features": features, "seconds": seconds,
                             "device": device.name, "source": "tile",
                             "rules": RULES_VERSION})  # fmt: skip
                done += 1
                if progress:
                    progress(f"tiles on {device.name}", done, total)
            for shape, pieces, axis in joins:
                mod = concat_module(shape, pieces, axis)
                seconds = profiler.measure(
                    mod, device, RecordKind.OP, {"join": pieces, "axis": axis}
                ).median_s
                features = {
                    "bytes": 4 * math.prod(shape),
                    "pieces": pieces,
                    **concat_layout(shape, pieces, axis),
                    **device_features(device),
                }
                rows.append({"estimator": "rearrange", "seconds": seconds, "features": features,
                             "device": device.name, "source": f"concat axis {axis}",
                             "rules": RULES_VERSION})  # fmt: skip
                done += 1
                if progress:
                    progress(f"joins on {device.name}", done, total)
            for kind in counts:
                counts[kind] += append_traces(out, (r for r in rows if r["estimator"] == kind))
    finally:
        close_runners(runners)
    counts["sync"] += append_traces(out, sync_traces(devices, cluster, db, options, progress))
    return counts


def sync_traces(
    devices: Sequence[DeviceSpec], cluster: ClusterSpec | None, db=None, options=None,
    progress: Progress | None = None, sizes: Sequence[int] = SYNC_SIZES, repeat: int = 5,
    idle_ms: Sequence[float] = (0.0, *IDLE_MS),
) -> list[dict]:  # fmt: skip
    """Timed transfers between every ordered pair of ``devices``: pulled worker to worker over
    the cluster, each size on a busy link and then after each of ``idle_ms`` (payloads up to
    :data:`IDLE_MAX_BYTES`; 0: busy), or copied with ``to_vdevice`` between devices of one
    process (no link to sit idle: busy only, when ``idle_ms`` has 0)."""
    from tvm_hetero.profiling.profiler import profiler_for
    from tvm_hetero.strategies.flexpie.planner import sync_row

    traces = []
    pairs = [(a, b) for a in devices for b in devices if a.name != b.name]
    for k, (src, dst) in enumerate(pairs):
        if src.colocated(dst) or cluster is None:
            timed = []
            if 0.0 in idle_ms:
                records = profiler_for(db, options).profile_transfer(src, dst, list(sizes))
                timed = [(r.workload["bytes"], 0.0, r.median_s) for r in records]
        else:
            timed = _pulled(cluster, src, dst, sizes, repeat, idle_ms)
        for nbytes, idle, seconds in timed:
            row = sync_row(int(nbytes), src, dst, cluster, len(devices), idle / 1e3)
            traces.append({"estimator": "sync", "seconds": seconds, "device": dst.name,
                           "features": row, "source": f"{src.name}->{dst.name}"})  # fmt: skip
        if progress:
            progress("transfers", k + 1, len(pairs))
    return traces


def _pulled(
    cluster: ClusterSpec, src: DeviceSpec, dst: DeviceSpec, sizes: Sequence[int], repeat: int,
    idle_ms: Sequence[float],
) -> list[tuple[int, float, float]]:  # fmt: skip
    """``dst``'s worker pulls payloads of each size from ``src``'s: ``(bytes, idle ms,
    seconds)``, the median of ``repeat`` pulls after :func:`drain_pulls` untimed ones, each
    timed pull after the link sat idle that long."""
    import statistics

    from tvm_hetero.runtime.remote_worker import connect_worker
    from tvm_hetero.runtime.rpc_worker import PREFIX

    receiver, _ = connect_worker(dst)
    sender, at_src = connect_worker(src)
    fill, pull = sender.get_function(PREFIX + "fill"), receiver.get_function(PREFIX + "probe")
    timed = []
    for nbytes in sizes:
        port = int(fill(f"trace{nbytes}", int(nbytes)))
        for idle in idle_ms:
            if idle and nbytes > IDLE_MAX_BYTES:
                continue
            found = pull(at_src[0], port, f"trace{nbytes}", repeat, drain_pulls(nbytes), idle / 1e3)
            timed.append((int(nbytes), float(idle), statistics.median(json.loads(found))))
    return timed


def drain_pulls(nbytes: int) -> int:
    """Untimed pulls of an ``nbytes`` payload before the timed ones: :data:`DRAIN_BYTES` of
    them, at most :data:`MAX_DRAIN_PULLS` (the worker's probe pulls once more untimed)."""
    return min(MAX_DRAIN_PULLS, math.ceil(DRAIN_BYTES / nbytes) - 1)


KERNEL_ESTIMATORS = ("compute", "rearrange")
"""The estimators whose traces time kernels the CPU schedule rules build (a sync trace times a
link): each of their rows carries its ``rules`` version (0: traced before they were recorded)."""


def read_traces(
    *paths: str | Path, newest_only: bool = True
) -> dict[str, tuple[list[dict], list[float]]]:
    """Traces of one or more files by estimator: ``(feature rows, seconds)``, in file order
    (a feature added since a trace was taken: :data:`LATER_FEATURES`); a row of
    :data:`KERNEL_ESTIMATORS` also holds its ``rules`` version (not a feature). With
    ``newest_only``, :func:`newest_kernels` of each.

    Raises
    ------
    ValueError
        Naming the file and line of a line that is not a trace.
    """
    found: dict[str, tuple[list[dict], list[float]]] = {}
    for path in paths:
        for n, line in enumerate(Path(path).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                t = json.loads(line)
                name = str(t["estimator"])
                row = {**LATER_FEATURES.get(name, {}), **t["features"]}
                if name in KERNEL_ESTIMATORS:
                    row["rules"] = int(t.get("rules", 0))
                seconds = float(t["seconds"])
            except (ValueError, KeyError, TypeError) as err:
                raise ValueError(f"{path}:{n}: not a trace ({err})") from None
            rows, times = found.setdefault(name, ([], []))
            rows.append(row)
            times.append(seconds)
    if newest_only:
        found = {name: newest_kernels(*traced) for name, traced in found.items()}
    return found


def newest_kernels(
    rows: Sequence[dict], seconds: Sequence[float]
) -> tuple[list[dict], list[float]]:
    """Of the traces of one estimator, those of the newest ``rules`` version traced for their
    vector lanes (a row without ``rules`` or ``lanes`` is kept): a kernel the rules have since
    changed is no longer what a build runs: fitted on traces of rules v12, the compute estimator
    priced the blocks of ResNet-18's last stage cut into tiles two columns wide at a fifth of
    the whole block (16 lanes), which the rules of v43 ran at a half (the work's share is two
    sevenths), and FlexPie's plans for it ran 1.55x their price."""
    newest = traced_rules(rows)
    kept = [
        (r, s)
        for r, s in zip(rows, seconds, strict=True)
        if "rules" not in r or "lanes" not in r or r["rules"] == newest[str(int(r["lanes"]))]
    ]
    return [r for r, _ in kept], [s for _, s in kept]
