"""FlexPie on tvm-hetero: a model's layers, the tiles every scheme gives them, their predicted
costs, and the partition as a :class:`SpatialPlan` that ``api.compile`` builds.

The pure parts are :mod:`tvm_hetero.plan.flexpie` (the reverse DP and the baselines) and
:mod:`tvm_hetero.costmodel.estimators` (the XGBoost estimators); the geometry is
:mod:`tvm_hetero.ir.tiles`'. A *layer* is what EdgePipe cuts (one tensor crosses after it) with
element-wise layers joined to the layer before (a convolution with its bias and activation, as
FlexPie's layers are). For every run of up to :data:`~tvm_hetero.plan.flexpie.MAX_RUN` layers
and every scheme this module computes each device's tiles exactly as ``PartitionSpatialTiles``
will (the same :func:`~tvm_hetero.ir.tiles.segment_needs`), asks the compute estimator for each
operator tile, and for every boundary counts the bytes each device receives from each other
device, priced by the sync and rearrange estimators along the cluster's routes. Operators no
scheme can cut (a classifier's flatten and matmul) stay on the home device at their measured
time.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from tvm_hetero._compat import TensorType, make_target
from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.costmodel.estimators import OP_KINDS, TOPOLOGIES, Estimator, conv_gflops, topology
from tvm_hetero.devices.cluster import ClusterSpec
from tvm_hetero.devices.spec import DeviceSpec
from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.ir.split_dims import ELEMENTWISE
from tvm_hetero.ir.tiles import (
    LAYOUT,
    NORMS,
    POOLS,
    SCHEMES,
    TUPLE_OPS,
    Box,
    box_shape,
    full_box,
    intersect,
    join_layout,
    needs,
    scheme_cells,
    segment_members,
    segment_needs,
    shape_of,
    tile_op,
)
from tvm_hetero.ir.types import itemsize
from tvm_hetero.ir.units import main_bindings
from tvm_hetero.plan import flexpie
from tvm_hetero.plan.flexpie import MAX_RUN, Segment, SpatialPartition, SpatialProblem
from tvm_hetero.plan.spatial_plan import SpatialPlan
from tvm_hetero.schedules.cpu import RULES_VERSION
from tvm_hetero.schedules.cpu.common import vector_lanes
from tvm_hetero.strategies.edgepipe.planner import pipeline_layers
from tvm_hetero.strategies.flexpie.traces import IDLE_MS

Progress = Callable[[str, int, int], None]
DEFAULT_MODELS = Path(__file__).resolve().parents[2] / "costmodel" / "models" / "flexpie"
"""The estimators shipped: trained on traces of the emulated cluster (``benchmarks/flexpie``)."""
LOCAL_MBPS = 1e5
"""The ``bandwidth_mbps`` of a copy between two devices of one process (memory, not a link)."""


def flexpie_layers(model: Model) -> list[list[str]]:
    """EdgePipe's layers with every layer of element-wise operators only joined to the one
    before it (FlexPie's layer: a convolution or pooling with its bias and activation)."""
    layers = [list(ops) for ops in pipeline_layers(OpGraph.from_module(model.mod)).ops]
    func = model.mod["main"]
    group = {op: k for k, ops in enumerate(layers) for op in ops}
    _, members = segment_members(func, main_bindings(func, "flexpie"), group, "flexpie")
    merged: list[list[str]] = []
    for ops, inside in zip(layers, members, strict=True):
        elementwise = all(
            isinstance(b.value, relax.Call) and b.value.op.name in ELEMENTWISE for b in inside
        )
        if merged and elementwise:
            merged[-1].extend(ops)
        else:
            merged.append(list(ops))
    return merged


@dataclass(frozen=True)
class Tile:
    """What one device computes of a segment: operator tiles (call, output box) and the part of
    each tensor from before the segment it reads."""

    device: int
    ops: tuple[tuple[relax.Call, Box], ...]
    reads: dict[relax.Var, Box]


class TileGeometry:
    """A model's layers and the tiles of every segment under every scheme (cached)."""

    def __init__(self, model: Model, layers: Sequence[Sequence[str]], devices: int) -> None:
        func = model.mod["main"]
        group = {op: k for k, ops in enumerate(layers) for op in ops}
        self.weights, self.members = segment_members(
            func, main_bindings(func, "flexpie"), group, "flexpie"
        )
        self.layers, self.devices = [list(o) for o in layers], devices
        self.outputs = [m[-1].var for m in self.members]

    def __len__(self) -> int:
        return len(self.members)

    @functools.cache  # noqa: B019 (one geometry per plan, dropped with it)
    def tiles(self, start: int, length: int, scheme: str) -> tuple[Tile, ...] | None:
        """The tiles of layers ``start .. start + length - 1`` as one segment in ``scheme``;
        ``None`` when some operator has no tile rule for it."""
        members = [b for m in self.members[start : start + length] for b in m]
        out = self.outputs[start + length - 1]
        shape = shape_of(out)
        if shape is None:
            return None
        try:
            cells = scheme_cells(scheme, shape, self.devices)
        except ValueError:
            return None
        inside = {b.var for b in members}
        bound = {b.var: b.value for b in members}
        tiles = []
        for device, box in cells:
            if scheme == "Home":
                ops = tuple((b.value, full_box(shape_of(b.var) or [])) for b in members)
                reads = _reads_whole(members, inside, self.weights)
            else:
                try:
                    need = segment_needs(members, self.weights, out, box)
                except ValueError:
                    return None
                calls = ((tile_op(b.value, bound), need.get(b.var)) for b in members)
                ops = tuple(  # parts of a split are crops: free
                    (call, box) for call, box in calls if call is not None and box is not None
                )
                reads = {v: bx for v, bx in need.items() if v not in inside}
            tiles.append(Tile(device, ops, reads))
        return tuple(tiles)

    def held(self, var: relax.Var, scheme: str | None) -> list[tuple[int, Box]]:
        """Where the tiles of ``var`` are: ``(device, box)`` under ``scheme``, whole on home
        for ``None`` (the model's inputs, and the output before a segment reads it)."""
        shape = shape_of(var) or []
        if scheme is None or scheme == "Home":
            return [(0, full_box(shape))]
        return scheme_cells(scheme, shape, self.devices)


def _reads_whole(members, inside, weights) -> dict[relax.Var, Box]:
    """The tensors from before the segment that ``members`` read, whole (a shape value read,
    ``R.shape_to_tensor`` of an ``R.shape_of`` in ONNX imports, has no data to move)."""
    reads = {}
    for b in members:
        for v in relax.analysis.free_vars(b.value):
            if v not in inside and v not in weights and isinstance(v.ty, TensorType):
                reads[v] = full_box(shape_of(v) or [])
    return reads


def device_features(device: DeviceSpec) -> dict[str, float]:
    """What the estimators know of a device: its threads, its CPU quota (0: none) and the
    float32 lanes of its vectors (which, with a tile's sizes, fix the kernel's vector width)."""
    lanes = vector_lanes(make_target(device.target), 32)
    return {"threads": device.threads or 0, "cpu_quota": device.cpu_quota or 0, "lanes": lanes}


def compute_row(call: relax.Call, out: Box, device: dict[str, float]) -> dict[str, float] | None:
    """The compute estimator's features of operator ``call`` computing box ``out`` on a device
    of ``device`` features (:func:`device_features`; empty: left to the caller); ``None`` for an
    operator it does not know (timed instead)."""
    if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    name = call.op.name
    size = box_shape(out)
    boxes = needs(call, out)
    if boxes is None or not size:
        return None
    first = boxes[0] if boxes[0] else out
    in_size = box_shape(first)
    if len(size) == len(in_size) == 4:
        shape = {"in_c": in_size[1], "in_h": in_size[2], "in_w": in_size[3], "out_c": size[1],
                 "out_h": size[2], "out_w": size[3]}  # fmt: skip
    else:  # (batch, ..., features): features as channels, the middle axes as rows (also a
        # 4-D output of a 3-D operand: a transformer's heads split from its features)
        rows_in, rows_out = int(np.prod(in_size[1:-1])), int(np.prod(size[1:-1]))
        shape = {"in_c": in_size[-1], "in_h": rows_in, "in_w": in_size[0], "out_c": size[-1],
                 "out_h": rows_out, "out_w": size[0]}  # fmt: skip
    read = [b for b in boxes if b is not None]
    row = {**shape, "k_h": 0, "k_w": 0, "stride": 1, "dilation": 1, "groups": 1,
           "inner": size[-1], "operands": len(read),
           "elements_read": sum(math.prod(box_shape(b)) for b in read),
           **device}  # fmt: skip
    a = call.attrs
    elements = float(np.prod(size)) / 1e9
    if name == "relax.nn.conv2d" and len(size) == 4:
        w = shape_of(call.args[1])
        groups = int(a.groups)
        depthwise = groups > 1 and groups == w[0]
        kind = "depthwise" if depthwise else "grouped" if groups > 1 else "conv2d"
        row |= {"k_h": w[2], "k_w": w[3], "stride": int(a.strides[0]),
                "dilation": int(a.dilation[0])}  # fmt: skip
        row["groups"] = size[1] if depthwise else groups
        row["gflops"] = conv_gflops(size[1], size[2], size[3], w[1], w[2], w[3])
    elif name in POOLS and len(size) == 4:
        kind = "pool"
        row |= {"k_h": int(a.pool_size[0]), "k_w": int(a.pool_size[1]), "stride": int(a.strides[0])}
        row["gflops"] = conv_gflops(size[1], size[2], size[3], 1, row["k_h"], row["k_w"]) / 2
    elif name == "relax.matmul":
        kind, reduced = "matmul", in_size[-1]
        row |= {"in_c": reduced, "k_h": reduced}
        row["gflops"] = 2.0 * float(np.prod(size)) * reduced / 1e9
    elif name in NORMS:
        kind, row["gflops"] = "norm", elements
    elif name in LAYOUT:
        kind, row["gflops"] = "layout", elements
    elif name in ELEMENTWISE or name in TUPLE_OPS:
        kind, row["gflops"] = "elementwise", elements
    else:
        return None
    return {**row, "kind": OP_KINDS[kind]}


def sync_row(
    nbytes: int, src: DeviceSpec, dst: DeviceSpec, cluster: ClusterSpec | None, count: int,
    idle_s: float = 0.0,
) -> dict[str, float]:  # fmt: skip
    """The sync estimator's features of moving ``nbytes`` from ``src`` to ``dst`` over links
    that sat idle ``idle_s`` before (at most the longest traced, :data:`~tvm_hetero.profiling.
    traces.IDLE_MS`; 0 within a process, where no link refills)."""
    return _with_payload(path_features(src, dst, cluster, count), nbytes, idle_s)


def path_features(
    src: DeviceSpec, dst: DeviceSpec, cluster: ClusterSpec | None, count: int
) -> dict[str, float]:
    """The features of :func:`sync_row` that the path from ``src`` to ``dst`` fixes (all but
    the bytes and the idle time)."""
    if src.colocated(dst) or cluster is None:
        return {"bandwidth_mbps": LOCAL_MBPS, "latency_ms": 0.0, "hops": 0,
                "topology": TOPOLOGIES["local"], "devices": count}  # fmt: skip
    path = cluster.route(src.name, dst.name)
    if path is None:
        raise ValueError(f"no link joins {src.name} and {dst.name}; give a cluster that joins them")
    names = [d.name for d in cluster.devices]
    shape = topology(names, [(ln.a, ln.b) for ln in cluster.links])
    return {"bandwidth_mbps": min(ln.bandwidth_mbps for ln in path),
            "latency_ms": sum(ln.latency_ms for ln in path), "hops": len(path),
            "topology": TOPOLOGIES[shape], "devices": count}  # fmt: skip


def _with_payload(path: dict[str, float], nbytes: int, idle_s: float) -> dict[str, float]:
    idle_ms = min(idle_s * 1e3, IDLE_MS[-1]) if path["hops"] else 0.0
    return {"bytes": nbytes, **path, "idle_ms": idle_ms}


class Paths:
    """The route and :func:`path_features` of each pair of a cluster's devices, found once (a
    boundary is priced once per segment before it: routing each piece again was most of a
    plan's search)."""

    def __init__(self, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None) -> None:
        self.devices, self.cluster, self.found = devices, cluster, {}

    def _pair(self, src: int, dst: int) -> tuple[tuple[tuple[str, str], ...], dict]:
        if (src, dst) not in self.found:
            a, b = self.devices[src], self.devices[dst]
            self.found[src, dst] = (
                _route(a, b, self.cluster),
                path_features(a, b, self.cluster, len(self.devices)),
            )
        return self.found[src, dst]

    def route(self, src: int, dst: int) -> tuple[tuple[str, str], ...]:
        """The directed links from device index ``src`` to ``dst`` (:func:`_route`)."""
        return self._pair(src, dst)[0]

    def sync_row(self, nbytes: int, src: int, dst: int, idle_s: float) -> dict[str, float]:
        """:func:`sync_row` of ``nbytes`` from device index ``src`` to ``dst``."""
        return _with_payload(self._pair(src, dst)[1], nbytes, idle_s)


@dataclass(frozen=True)
class Estimators:
    """The three estimators a FlexPie plan needs."""

    compute: Estimator
    sync: Estimator
    rearrange: Estimator

    @classmethod
    def load(cls, folder: str | Path | None = None) -> Estimators:
        """The estimators in ``folder`` (``tvm-hetero train``'s output; default: shipped)."""
        folder = Path(folder or DEFAULT_MODELS)
        return cls(*(Estimator.load(folder, n) for n in ("compute", "sync", "rearrange")))


class _Pricer:
    """Batches estimator rows and remembers their predictions."""

    def __init__(self, estimator: Estimator) -> None:
        self.estimator, self.rows, self.index = estimator, [], {}

    def ask(self, row: dict[str, float]) -> int:
        key = tuple(row.values())
        if key not in self.index:
            self.index[key] = len(self.rows)
            self.rows.append(row)
        return self.index[key]

    def answers(self) -> np.ndarray:
        return self.estimator.predict(self.rows) if self.rows else np.zeros(0)


def problem_of(
    geometry: TileGeometry, devices: Sequence[DeviceSpec], estimators: Estimators,
    cluster: ClusterSpec | None, whole_s: dict[relax.Call, float], max_run: int = MAX_RUN,
    handoff_s: float = 0.0, segment_s: Mapping[str, float] | None = None,
    compute_scale: float = 1.0,
) -> SpatialProblem:  # fmt: skip
    """The planner's costs: ``compute_s`` per segment and scheme (the slowest device's tiles,
    plus ``segment_s[scheme]`` for a segment cut over the devices), ``move_s`` per boundary
    and segment before (:func:`boundary_seconds`: the busiest receiver, sender or link, each
    piece priced with the links idle since the last boundary that moved bytes,
    :func:`idle_seconds`, and sharing a link's burst with the boundary's other pieces over
    it, :func:`priced`; the model's input after links idle as long as traced). ``whole_s`` is
    the measured time of each operator the compute estimator does not know (by its call), on the
    home device; ``handoff_s`` what the runtime spends on each piece that passes between two
    devices besides moving its bytes (a copy step and a unit's dispatch:
    ``Profiler.profile_handoff``); ``segment_s`` what a segment cut over every device in each
    scheme costs the runtime besides its tiles and pieces (:func:`segment_seconds`; a scheme
    it does not name, nothing); ``compute_scale`` multiplies the compute estimator's every
    price (:func:`compute_scale`)."""
    n, k = len(geometry), len(SCHEMES)
    features = [device_features(d) for d in devices]  # a target each: once, not per tile
    compute_arr = _compute_seconds(geometry, features, estimators.compute, whole_s, max_run,
                                   segment_s or {}, compute_scale)  # fmt: skip
    sync, rearrange = _Pricer(estimators.sync), _Pricer(estimators.rearrange)
    boundaries: dict[tuple[int, int, int, int], list] = {}
    paths = Paths(devices, cluster)
    held_schemes = [*SCHEMES, None]
    for a, d, q in zip(*np.nonzero(np.isfinite(compute_arr)), strict=True):
        a, d, q = int(a), int(d) + 1, int(q)
        for p, held in enumerate(held_schemes):
            if (a == 0) != (held is None):
                continue
            try:
                boundaries[a, p, q, d] = transfers_into(
                    geometry, geometry.tiles(a, d, SCHEMES[q]), a, held, paths, features,
                    rearrange,
                )  # fmt: skip
            except ValueError:  # the layer before cannot be held in scheme p
                continue
    out = geometry.outputs[-1]
    final = Tile(0, (), {out: full_box(shape_of(out) or [])})
    for p, held in enumerate(SCHEMES):
        try:
            boundaries[n, p, k, 0] = transfers_into(
                geometry, (final,), n, held, paths, features, rearrange
            )
        except ValueError:
            continue
    idle = idle_seconds(compute_arr, boundaries)
    move_terms = {}
    for (a, p, q, d), boundary in boundaries.items():
        if a == 0:
            move_terms[a, p, 0, q, d] = priced(boundary, paths, sync, np.inf)
        for e in range(1, min(max_run, a) + 1):  # the segment before: e layers in scheme p
            if np.isfinite(idle[a, p, e]):
                move_terms[a, p, e, q, d] = priced(boundary, paths, sync, idle[a, p, e])
    sync_s, rearrange_s = sync.answers(), rearrange.answers()
    move_arr = np.full((n + 1, k + 1, max_run + 1, k + 1, max_run + 1), np.inf)
    for key, per_receiver in move_terms.items():
        move_arr[key] = boundary_seconds(per_receiver, sync_s, rearrange_s, handoff_s)
    return SpatialProblem(SCHEMES, compute_arr, move_arr)


def idle_seconds(compute_s: np.ndarray, boundaries: dict) -> np.ndarray:
    """``idle[a, p, e]``: how long the links sat idle before the boundary into layer ``a``,
    after a segment of ``e`` layers in scheme ``p``: that segment's compute and, when the
    boundary into it moved nothing (a 1x1 convolution's rows need no halo), the compute
    before that back to the last boundary that moved bytes, the layers there taken as
    segments of one layer in ``p`` (a lower bound: they may have been fused). ``inf`` where
    that segment cannot be; ``boundaries[a, p, q, d]``: :func:`transfers_into` of a move."""
    n, runs, k = compute_s.shape

    def silent(a: int, p: int, d: int) -> bool:
        found = boundaries.get((a, p, p, d))
        return a > 0 and found is not None and not any(moves for moves, _ in found)

    quiet = np.zeros((n + 1, k))  # before layer a, the layers before it one-layer segments
    for a in range(1, n + 1):
        for p in range(k):
            if np.isfinite(compute_s[a - 1, 0, p]):
                quiet[a, p] = compute_s[a - 1, 0, p] + (quiet[a - 1, p] if silent(a - 1, p, 1)
                                                        else 0.0)  # fmt: skip
    idle = np.full((n + 1, k, runs + 1), np.inf)
    for a in range(1, n + 1):
        for e in range(1, min(runs, a) + 1):
            for p in range(k):
                before = quiet[a - e, p] if silent(a - e, p, e) else 0.0
                idle[a, p, e] = compute_s[a - e, e - 1, p] + before
    return idle


def _compute_seconds(
    geometry: TileGeometry, features: Sequence[dict[str, float]], estimator: Estimator,
    whole_s: dict[relax.Call, float], max_run: int, segment_s: Mapping[str, float],
    scale: float = 1.0,
) -> np.ndarray:  # fmt: skip
    """``compute_s`` of :class:`SpatialProblem`: each segment's slowest device (``inf`` where
    its scheme cannot cut a layer or the estimator knows an operator of a cut one);
    ``features``: :func:`device_features` of each device; the estimator's prices times
    ``scale``."""
    n, k = len(geometry), len(SCHEMES)
    compute = _Pricer(estimator)
    segment_terms: dict[tuple[int, int, int], list] = {}
    for a in range(n):
        for d in range(1, min(max_run, n - a) + 1):
            for q, scheme in enumerate(SCHEMES):
                tiles = geometry.tiles(a, d, scheme)
                if tiles is None:
                    continue
                terms = []
                for t in tiles:
                    for call, box in t.ops:
                        row = compute_row(call, box, features[t.device])
                        if row is not None:
                            terms.append((t.device, compute.ask(row), 0.0))
                        elif scheme == "Home":  # timed; aliases and tuple items cost nothing
                            terms.append((t.device, None, whole_s.get(call, 0.0)))
                        else:
                            break
                    else:
                        continue
                    break
                else:
                    segment_terms[a, d, q] = terms
    compute_s = compute.answers() * scale
    compute_arr = np.full((n, max_run, k), np.inf)
    for (a, d, q), terms in segment_terms.items():
        per_device = np.zeros(len(features))
        for dev, idx, fixed in terms:
            per_device[dev] += fixed if idx is None else compute_s[idx]
        compute_arr[a, d - 1, q] = per_device.max() + segment_s.get(SCHEMES[q], 0.0)
    return compute_arr


def boundary_seconds(
    per_receiver: Sequence[tuple[list[Piece], list[int]]], sync_s: np.ndarray,
    rearrange_s: np.ndarray, handoff_s: float,
) -> float:  # fmt: skip
    """A boundary's time: its busiest device or link. A receiver pulls its pieces one after
    another (each a sync time and a handoff), then joins them; a sender serves its pieces from
    one CPU and its own links, so they take at least their sum (scattering a layer from home to
    three devices over 50 Mbit/s links took three pieces' time, not one: the receivers-only
    price was 40 % under the measured latency of such plans); a link, in each direction,
    carries the pieces routed over it one after another, whoever sent them (a piece two hops
    away shares the link between with that link's own pieces)."""
    worst, load = 0.0, {}
    for syncs, joins in per_receiver:
        moved = sum(p.seconds(sync_s) for p in syncs) + len(syncs) * handoff_s
        worst = max(worst, moved + sum(rearrange_s[i] for i in joins))
        for p in syncs:
            for key in (("sender", p.src), *p.route):
                load[key] = load.get(key, 0.0) + p.seconds(sync_s)
    return max(worst, *load.values()) if load else worst


@dataclass(frozen=True)
class Piece:
    """A piece a device receives from another: its sender, its sync estimator row, the
    directed links it crosses (``(from, to)`` device names; none between colocated devices)
    and, when its links carried other pieces of the boundary before it, the row of those
    bytes (``-1``: none): the piece then costs what it adds to theirs (a shaped link's
    refilled burst is shared by everything it carries)."""

    src: int
    sync: int
    route: tuple[tuple[str, str], ...] = ()
    before: int = -1

    def seconds(self, sync_s: np.ndarray) -> float:
        """Its time, from the sync estimator's answers."""
        if self.before < 0:
            return float(sync_s[self.sync])
        return max(0.0, float(sync_s[self.sync] - sync_s[self.before]))


def _route(
    src: DeviceSpec, dst: DeviceSpec, cluster: ClusterSpec | None
) -> tuple[tuple[str, str], ...]:
    """The directed links a piece from ``src`` to ``dst`` crosses (none within a process)."""
    if src.colocated(dst) or cluster is None:
        return ()
    path, here, hops = cluster.route(src.name, dst.name) or [], src.name, []
    for link in path:
        there = link.b if link.a == here else link.a
        hops.append((here, there))
        here = there
    return tuple(hops)


@dataclass(frozen=True)
class Transfer:
    """Bytes device ``dst`` receives from device ``src`` at a boundary, and the directed links
    they cross: a :class:`Piece` before it is priced."""

    src: int
    dst: int
    nbytes: int
    route: tuple[tuple[str, str], ...] = ()


def transfers_into(
    geometry: TileGeometry, tiles, a: int, held: str | None, paths: Paths, features,
    rearrange,
) -> list[tuple[list[Transfer], list[int]]]:  # fmt: skip
    """Per receiving tile: each :class:`Transfer` it receives from another device and the
    rearrange rows of joining them (``features``: :func:`device_features` of each device)."""
    entering = geometry.outputs[a - 1] if a > 0 else None
    result = []
    for tile in tiles:
        moves, joins = [], []
        for var, box in tile.reads.items():
            cells = geometry.held(var, held if var.same_as(entering) else None)
            parts, total = [], 0
            for src, have in cells:
                common = intersect(have, box)
                if common is None:
                    continue
                nbytes = math.prod(box_shape(common)) * itemsize(str(var.ty.dtype))
                parts.append(common)
                total += nbytes
                if src != tile.device:
                    route = paths.route(src, tile.device)
                    moves.append(Transfer(src, tile.device, nbytes, route))
            if len(parts) > 1:
                row = {"bytes": total, "pieces": len(parts), **join_layout(parts, box),
                       **features[tile.device]}  # fmt: skip
                joins.append(rearrange.ask(row))
        result.append((moves, joins))
    return result


def priced(
    boundary: Sequence[tuple[list[Transfer], list[int]]], paths: Paths, sync: _Pricer,
    idle_s: float,
) -> list[tuple[list[Piece], list[int]]]:  # fmt: skip
    """A boundary's transfers as pieces with sync rows, after the links sat idle ``idle_s``
    (a shaper's bucket refilled): a piece whose links already carried ``b`` bytes of the
    boundary costs the time of ``b`` plus its bytes less that of ``b`` (:class:`Piece`), so
    that the pieces over one link share its burst and together cost their sum moved at once."""
    carried: dict[tuple[str, str], int] = {}
    out = []
    for moves, joins in boundary:
        pieces = []
        for t in moves:
            before = max((carried.get(link, 0) for link in t.route), default=0)
            for link in t.route:
                carried[link] = carried.get(link, 0) + t.nbytes
            row = sync.ask(paths.sync_row(before + t.nbytes, t.src, t.dst, idle_s))
            first = sync.ask(paths.sync_row(before, t.src, t.dst, idle_s)) if before else -1
            pieces.append(Piece(t.src, row, t.route, first))
        out.append((pieces, joins))
    return out


def to_plan(
    geometry: TileGeometry, devices: Sequence[DeviceSpec], partition: SpatialPartition,
    strategy: str,
) -> SpatialPlan:  # fmt: skip
    """The partition as a plan: each segment's layers' operators and its scheme."""
    return SpatialPlan(
        tuple(d.name for d in devices),
        tuple(
            tuple(op for layer in geometry.layers[s.start : s.stop] for op in layer)
            for s in partition.segments
        ),
        tuple(s.scheme for s in partition.segments),
        tuple((s.start, s.stop - 1) for s in partition.segments),
        strategy,
        partition.predicted_s,
    )


@dataclass(frozen=True)
class FlexPieResult:
    """FlexPie's plan with what it was made from, and the baselines through the same costs;
    ``handoff_s`` and ``segment_s`` (per scheme) are the runtime's costs it measured on the
    devices (:func:`handoff_seconds`, :func:`segment_seconds`), ``compute_scale`` what the
    compute estimator's prices were multiplied by (:func:`compute_scale`), ``stale`` what it
    has not traced of the devices' kernels (:func:`stale_kernels`). Once confirmed end to end
    (:func:`~tvm_hetero.strategies.flexpie.confirm.confirm_by_measurement`), ``confirmed_s``
    holds the measured seconds of each plan timed, by name (``flexpie`` or a baseline's), and
    ``plan`` is the fastest of them, :attr:`kept` (empty and ``flexpie`` before)."""

    plan: SpatialPlan
    geometry: TileGeometry
    problem: SpatialProblem
    partition: SpatialPartition
    baselines: dict[str, SpatialPartition]
    search_s: float
    handoff_s: float = 0.0
    segment_s: Mapping[str, float] = field(default_factory=dict)
    confirmed_s: Mapping[str, float] = field(default_factory=dict)
    compute_scale: float = 1.0
    stale: str | None = None

    @property
    def kept(self) -> str:
        """The name of the plan ``plan`` is: the fastest timed, or ``flexpie`` when none was."""
        found = self.confirmed_s
        return min(found, key=found.__getitem__) if found else "flexpie"

    def partitions(self) -> dict[str, SpatialPartition]:
        """FlexPie's partition and every baseline's, by name."""
        return {"flexpie": self.partition, **self.baselines}

    def baseline_plans(self, devices: Sequence[DeviceSpec]) -> dict[str, SpatialPlan]:
        """Each baseline as a plan ``api.compile`` builds."""
        return {n: to_plan(self.geometry, devices, p, n) for n, p in self.baselines.items()}


def whole_op_seconds(
    model: Model, geometry: TileGeometry, device: DeviceSpec, db: str | Path | None = None,
    options: BuildOptions | None = None,
) -> dict[relax.Call, float]:  # fmt: skip
    """Measured seconds (on ``device``) of each operator the compute estimator does not know,
    by its call; one that reads a shape value (``R.shape_to_tensor``: no kernel of its own to
    time, and no module of it alone is well formed) is left out, priced 0."""
    from tvm_hetero.ir.bindings import op_bindings
    from tvm_hetero.profiling.profiler import profiler_for
    from tvm_hetero.runtime.timer import close_runners, runners_for

    ids = {b.var: b.node_id for b in op_bindings(model.mod["main"])}
    unknown = [
        b for m in geometry.members for b in m
        if b.var in ids and compute_row(b.value, full_box(shape_of(b.var) or []), {}) is None
        and not any(isinstance(v.ty, relax.ShapeType) for v in relax.analysis.free_vars(b.value))
    ]  # fmt: skip
    if not unknown:
        return {}
    runners = runners_for([device])
    try:
        profiler = profiler_for(db, options, runners[device.name])
        return {
            b.value: profiler.profile_op(model.mod, ids[b.var], device).median_s for b in unknown
        }
    finally:
        close_runners(runners)


def handoff_seconds(
    devices: Sequence[DeviceSpec], db: str | Path | None = None,
    options: BuildOptions | None = None, cluster: ClusterSpec | None = None,
) -> float:  # fmt: skip
    """The runtime's cost of one piece passing between the first two devices (measured, kept in
    the profile database under the devices and, on a ``cluster``, its links), or 0 for one
    device or devices that are not CPU workers."""
    from tvm_hetero.devices.spec import DeviceKind
    from tvm_hetero.profiling.profiler import profiler_for

    if len(devices) < 2 or not devices[0].kind is devices[1].kind is DeviceKind.CPU:
        return 0.0
    setting = _setting(devices[:2], cluster) if cluster is not None else ""
    profiler = profiler_for(db, options)
    return profiler.profile_handoff(devices[0], devices[1], setting=setting).median_s


PROBE_LAYERS = 6
"""Layers of the probe :func:`segment_seconds` runs, each a segment of its own."""


def load_probe(devices: int) -> Model:
    """The model :func:`segment_seconds` runs: :data:`PROBE_LAYERS` 3x3 convolutions of four
    channels on an image of four rows per device."""
    from tvm_hetero.frontends.load import load_model
    from tvm_hetero.ir.workloads import conv_chain_module

    return load_model(conv_chain_module(PROBE_LAYERS, size=4 * devices), name="segment-probe")


def segment_seconds(
    devices: Sequence[DeviceSpec], estimators: Estimators, cluster: ClusterSpec | None = None,
    handoff_s: float = 0.0, db: str | Path | None = None, options: BuildOptions | None = None,
    compute_scale: float = 1.0,
) -> dict[str, float]:  # fmt: skip
    """What a segment cut over every device costs the runtime besides what the estimators and
    the handoffs price, per scheme: the client starts a unit on each device and the next
    segment's units only once every piece they read exists (each segment ends in a barrier),
    every step of that passes through the client, and how many pieces a tile waits for, from
    how many devices over how many hops, is the scheme's (a 2 x 2 grid tile waits for three,
    one of them two hops away on a ring; a row for at most two neighbours). Measured on the
    devices themselves: a chain of :data:`PROBE_LAYERS` small convolutions cut in the scheme
    over all of them, each layer a segment, run end to end (``Profiler.profile_run``, kept in
    the profile database under the devices and the cluster's links), less its price without
    this term, per segment. On the emulated ring of four at 1 Gbit/s it left 1.5 ms a segment
    in rows, columns and channels, 2.7 in a grid (the PS of four at 200 Mbit/s: 1.4, 1.6, 0.9
    and 2.3); one term for all, from rows, had priced ResNet-18's grid plan 5 % ahead of its
    rows, which ran 8-12 % ahead of it. Empty for one device; a scheme that cannot cut the
    probe, or whose probe ran under its price, costs nothing. The probe's tiles are priced
    with ``compute_scale`` (:func:`compute_scale`), so what the estimator misses on this host
    is not counted here too."""
    if len(devices) < 2:
        return {}
    from tvm_hetero.profiling.profiler import profiler_for

    probe = load_probe(len(devices))
    geometry = TileGeometry(probe, flexpie_layers(probe), len(devices))
    problem = problem_of(
        geometry, devices, estimators, cluster, {}, 1, handoff_s, compute_scale=compute_scale
    )
    setting = _setting(devices, cluster)
    profiler = profiler_for(db, options)
    out = {}
    for name, partition in flexpie.baselines(problem).items():
        scheme = name.removeprefix("fixed-")  # every layer it can cut, a segment each
        cut = sum(s.scheme != "Home" for s in partition.segments)
        if scheme == name or not cut:
            continue
        plan = to_plan(geometry, devices, partition, name)
        measured = profiler.profile_run(probe, devices, plan, setting).median_s
        out[scheme] = max(0.0, (measured - partition.predicted_s) / cut)
    return out


SCALE_LIMITS = (0.25, 4.0)
"""The least and most :func:`compute_scale` gives: beyond them the estimators are not of this
kind of device at all, and a user should train their own (``tvm-hetero train``)."""


def home_compute_seconds(
    geometry: TileGeometry, device: DeviceSpec, estimator: Estimator,
    whole_s: Mapping[relax.Call, float],
) -> tuple[float, float]:  # fmt: skip
    """The whole model on ``device`` alone, layer by layer: ``(seconds the compute estimator
    prices, seconds measured of the operators it does not know)``."""
    pricer, asked, known = _Pricer(estimator), [], 0.0
    features = device_features(device)
    for a in range(len(geometry)):
        for tile in geometry.tiles(a, 1, "Home") or ():
            for call, box in tile.ops:
                row = compute_row(call, box, features)
                if row is None:
                    known += whole_s.get(call, 0.0)
                else:
                    asked.append(pricer.ask(row))
    answers = pricer.answers()
    return float(sum(answers[i] for i in asked)), known


def compute_scale(
    model: Model, geometry: TileGeometry, devices: Sequence[DeviceSpec], estimators: Estimators,
    whole_s: Mapping[relax.Call, float], db: str | Path | None = None,
    options: BuildOptions | None = None, cluster: ClusterSpec | None = None,
    home_s: float | None = None,
) -> float:  # fmt: skip
    """How much longer this host's home device takes than the compute estimator prices: the
    whole model run on it alone (``home_s`` where a search ran it already, else
    ``Profiler.profile_run``, kept in the profile database under the devices and the links),
    less the operators the estimator does not know (measured:
    ``whole_s``), over the estimator's price of the rest (:func:`home_compute_seconds`),
    within :data:`SCALE_LIMITS`. The shipped estimators were fitted on traces of other hosts
    and of kernels since changed: on the emulated ring of four at 1 Gbit/s (AMD Zen 4, code
    for this CPU) they priced MobileNet on the home device alone 22.2 ms, which ran 36.5, and
    its tiled plans 1.3-1.6x under their measured times. 1.0 for one device (nothing is cut,
    so nothing is priced against anything) or where the run fails."""
    if len(devices) < 2:
        return 1.0
    from tvm_hetero.profiling.profiler import profiler_for

    priced_s, known_s = home_compute_seconds(geometry, devices[0], estimators.compute, whole_s)
    if priced_s <= 0:
        return 1.0
    if home_s is None:
        n = len(geometry)
        home = SpatialPartition((Segment(0, n, "Home", priced_s + known_s, 0.0),), 0.0)
        plan = to_plan(geometry, devices[:1], home, "single")
        profiler = profiler_for(db, options)
        try:
            run = profiler.profile_run(model, devices[:1], plan, _setting(devices, cluster))
        except RuntimeError:  # a build or run that failed (a device too small for the model)
            return 1.0
        home_s = run.median_s
    low, high = SCALE_LIMITS
    return min(high, max(low, (home_s - known_s) / priced_s))


def _setting(devices: Sequence[DeviceSpec], cluster: ClusterSpec | None) -> str:
    """The devices and links a run's time depends on, without addresses (an emulated cluster
    brought up again listens elsewhere)."""
    addresses = ("host", "key")
    said = {
        "devices": [{k: v for k, v in d.to_dict().items() if k not in addresses} for d in devices]
    }
    if cluster is not None:
        said["links"] = [ln.to_dict() for ln in cluster.links]
        said["topology"] = cluster.topology.value
    return json.dumps(said, sort_keys=True)


def stale_kernels(estimator: Estimator, devices: Sequence[DeviceSpec]) -> str | None:
    """What the compute estimator has not traced of the kernels the devices' builds run: for
    each vector width among the CPU devices, traces of older CPU rules than
    :data:`~tvm_hetero.schedules.cpu.RULES_VERSION` or none (``notes["rules"]``,
    :func:`~tvm_hetero.costmodel.estimators.traced_rules`); ``None`` when it traced them all.
    Its prices are then of other kernels: :func:`compute_scale` corrects their sum on the home
    device, not how a layer's tiles share its time."""
    traced = estimator.notes.get("rules", {})
    lanes = sorted({int(device_features(d)["lanes"]) for d in devices if d.kind == "cpu"})
    newest = {n: traced.get(str(n), 0) for n in lanes}
    said = [f"{n} lanes: v{v}" for n, v in newest.items() if 0 < v < RULES_VERSION]
    unversioned = [f"{n} lanes" for n, v in newest.items() if v == 0]
    if unversioned:
        said.append(f"{', '.join(unversioned)}: not traced with versioned rules")
    if not said:
        return None
    return (
        f"the compute estimator timed older kernels than these builds run (rules v{RULES_VERSION}; "
        f"{'; '.join(said)}): tiles may be priced off; tvm-hetero collect-traces, then train"
    )


def plan_with_estimators(
    model: Model, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None = None,
    estimators: Estimators | None = None, db: str | Path | None = None,
    options: BuildOptions | None = None, max_run: int = MAX_RUN,
    progress: Progress | None = None, home_s: float | None = None,
) -> FlexPieResult:  # fmt: skip
    """FlexPie end to end: layers, every segment's tiles, the estimators' costs (calibrated by
    the home device's time alone, ``home_s`` where already measured: :func:`compute_scale`),
    the reverse DP and the baselines (fixed schemes, layer-wise, fused)."""
    estimators = estimators or Estimators.load()
    layers = flexpie_layers(model)
    geometry = TileGeometry(model, layers, len(devices))
    if progress:
        progress("timing the operators no scheme cuts", 0, 3)
    whole = whole_op_seconds(model, geometry, devices[0], db, options)
    handoff = handoff_seconds(devices, db, options, cluster)
    if progress:
        progress("timing the home device alone", 1, 4)
    scale = compute_scale(model, geometry, devices, estimators, whole, db, options, cluster,
                          home_s)  # fmt: skip
    if progress:
        progress("timing a tiled segment on the devices", 2, 4)
    segment = segment_seconds(devices, estimators, cluster, handoff, db, options, scale)
    if progress:
        progress("pricing tiles and exchanges", 3, 4)
    problem = problem_of(
        geometry, devices, estimators, cluster, whole, max_run, handoff, segment, scale
    )
    start = time.perf_counter()
    partition = flexpie.flexpie(problem)
    search_s = time.perf_counter() - start
    if progress:
        progress("planned", 4, 4)
    plan = to_plan(geometry, devices, partition, "flexpie")
    baselines = flexpie.baselines(problem)
    return FlexPieResult(plan, geometry, problem, partition, baselines, search_s, handoff,
                         segment, compute_scale=scale,
                         stale=stale_kernels(estimators.compute, devices))  # fmt: skip
