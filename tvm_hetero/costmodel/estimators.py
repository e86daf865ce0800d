"""FlexPie's data-driven cost estimators: gradient-boosted trees (XGBoost) on traces.

Three estimators, as FlexPie's code has them (``xgb_comp``, ``xgb_tran``, ``xgb_reset``):

* **compute** (the paper's i-Estimator): seconds of one operator on one tile, from the tile's
  shape (input and output channels, height, width), the kernel, stride, dilation and groups,
  the operator's kind and the device's threads and CPU quota;
* **sync** (the s-Estimator): seconds to move a piece of a tensor from one device to another,
  from its bytes, the route's bandwidth, latency and hops, the cluster's topology (ring,
  parameter server, mesh: FlexPie's categorical feature) and how long the route sat idle before;
* **rearrange**: seconds to join the pieces a device received into its tile (``concat``), from
  the bytes, the number of pieces, how the copy walks memory and the copy loop the injective
  rule builds for it (:func:`_join_columns`).

Each is fitted on the log of seconds per unit of work (:data:`WORK`; relative error is what
matters across microseconds and seconds) from traces this package measured (``tvm-hetero
collect-traces``), with a held-out split whose mean absolute percentage error is kept with the
model. Pure: numbers in, numbers
out; the features are built by the FlexPie strategy and the trace collector.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FEATURES: dict[str, tuple[str, ...]] = {
    "compute": (
        "kind", "in_c", "in_h", "in_w", "out_c", "out_h", "out_w", "k_h", "k_w", "stride",
        "dilation", "groups", "gflops", "inner", "operands", "elements_read", "threads",
        "cpu_quota", "lanes",
    ),
    "sync": ("bytes", "bandwidth_mbps", "latency_ms", "hops", "topology", "devices", "idle_ms"),
    "rearrange": ("bytes", "pieces", "runs", "inner", "axis", "span", "threads", "cpu_quota",
                  "lanes"),
}  # fmt: skip
"""Feature names of each estimator, in column order (``inner``: the tile's innermost output
extent; ``operands`` and ``elements_read``: the tensors the operator reads and their elements in
the tile, weights included; ``lanes``: the device's float32 vector lanes; ``runs``, ``inner``,
``axis``, ``span``: how a join walks memory, :func:`~tvm_hetero.ir.tiles.join_layout`;
``idle_ms``: how long the links sat idle before the piece, whose shapers then let a burst
through at once)."""

DERIVED: dict[str, tuple[str, ...]] = {
    "compute": ("out_elements", "in_elements", "vector", "channel_tile", "channel_vector"),
    "rearrange": ("run_bytes", "vector", "vectors", "whole_vectors"),
}
"""Columns computed from the features before the trees see them: the tile's sizes, and the
vector width and channel tile the CPU rules give it (:func:`_vectors`; the largest divisor of
the output channels up to the convolution rule's channel tile), and whether the convolution
rule vectorizes it by output channel (:func:`_channel_vectorized`: rows of 1-5 columns). Trees split
on one column at a time and cannot find a divisor: without these the compute estimator held out
at 19 % MAPE, with them 11 % (a row of 22 runs in vectors of 2 where one of 20 runs in 4).
A join's ``run_bytes`` is its bytes over its runs (the length of one copy); its ``vector`` the
injective rule's (the largest divisor of the innermost extent up to the lanes: 7 for a row of
28 on 8 lanes), ``vectors`` the copy loop's steps, and ``whole_vectors`` whether a run is a
whole number of vectors (else vectors straddle two pieces): :func:`_join_columns`. Without
them the rearrange estimator held out at 19.7 %, with them 15.2 % (2026-11-27)."""

OP_KINDS = {"conv2d": 0, "depthwise": 1, "grouped": 2, "pool": 3, "elementwise": 4, "matmul": 5,
            "norm": 6, "layout": 7}  # fmt: skip
"""The ``kind`` feature of the compute estimator."""

TOPOLOGIES = {"local": 0, "ring": 1, "ps": 2, "mesh": 3, "other": 4}
"""The ``topology`` feature of the sync estimator (``local``: devices of one process)."""

WORK: dict[str, tuple[str, float]] = {
    "compute": ("gflops", 1e-5),
    "sync": ("bytes", 65536.0),
    "rearrange": ("bytes", 4096.0),
}
"""Each estimator learns seconds per unit of work, ``seconds / (feature + floor)``: a rate
that trees can carry past the largest traced tile (trees cannot extrapolate a time), which is
what a 224-pixel layer asks of traces taken at 112. A convolution's work is the columns it
computes (:func:`_widened`), not those it keeps."""

PARAMS = {"objective": "reg:squarederror", "eta": 0.05, "max_depth": 8, "subsample": 0.9,
          "min_child_weight": 3}  # fmt: skip
ROUNDS = 400


@dataclass
class Estimator:
    """One fitted estimator: its booster, its features and how well it held out.

    Attributes
    ----------
    name : str
        ``compute``, ``sync`` or ``rearrange``.
    booster : xgboost.Booster
        Trees predicting ``log(seconds / work)`` (:data:`WORK`).
    held_out_mape : float
        Mean absolute percentage error on the traces kept out of training.
    traces : int
        Distinct workloads it was trained on (repeated traces of one workload count once).
    notes : dict
        Where the traces came from; ``rules``: the newest CPU rules version of the kernels
        they timed, by vector lanes (:func:`traced_rules`; none for a link's estimator).
    """

    name: str
    booster: Any
    held_out_mape: float
    traces: int
    notes: dict[str, Any] = field(default_factory=dict)

    def predict(self, rows: Sequence[Mapping[str, float]] | np.ndarray) -> np.ndarray:
        """Seconds for each row (mappings of feature name to value, or a matrix in
        :data:`FEATURES` order)."""
        matrix = _matrix(self.name, rows)
        if len(matrix) == 0:
            return np.zeros(0)
        rate = np.exp(self.booster.predict(_design(self.name, matrix)))
        return rate * _work(self.name, matrix)

    def save(self, folder: str | Path) -> Path:
        """Write ``<name>.json`` (the trees) and ``<name>.meta.json`` into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(folder / f"{self.name}.json"))
        meta = {"features": columns(self.name), "work": work_of(self.name),
                "held_out_mape": self.held_out_mape, "traces": self.traces,
                "notes": self.notes}  # fmt: skip
        (folder / f"{self.name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        return folder / f"{self.name}.json"

    @classmethod
    def load(cls, folder: str | Path, name: str) -> Estimator:
        """Read what :meth:`save` wrote; ``FileNotFoundError`` naming a missing file, a
        ``ValueError`` naming a file that is not what :meth:`save` writes (damaged, edited,
        another model's)."""
        import xgboost as xgb

        folder = Path(folder)
        meta_file = folder / f"{name}.meta.json"
        try:
            meta = json.loads(meta_file.read_text())
            features, notes = meta["features"], meta["notes"]
            held_out, traces = float(meta["held_out_mape"]), int(meta["traces"])
            learned = meta.get("work", WORK[name][0])  # saved before work was kept
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # JSON's errors too
            raise ValueError(
                f"{meta_file}: not an estimator's description from tvm-hetero train "
                f"({type(err).__name__}: {err})"
            ) from None
        if features != columns(name):
            raise ValueError(f"{folder / name}: trained on features {features}, not ours")
        if learned != work_of(name):
            raise ValueError(
                f"{folder / name}: learned seconds per {learned!r}, not per {work_of(name)!r}: "
                "train it again (tvm-hetero train)"
            )
        booster = xgb.Booster()
        try:
            booster.load_model(str(folder / f"{name}.json"))
        except (xgb.core.XGBoostError, UnicodeDecodeError) as err:  # (its message undecodable)
            if not (folder / f"{name}.json").is_file():
                raise FileNotFoundError(f"{folder / name}.json: no such file") from None
            first = str(err).strip().splitlines()[0][:160]
            raise ValueError(f"{folder / name}.json: not XGBoost trees ({first})") from None
        return cls(name, booster, held_out, traces, notes)


def columns(name: str) -> list[str]:
    """The trees' columns: :data:`FEATURES`, then :data:`DERIVED`."""
    return [*FEATURES[name], *DERIVED.get(name, ())]


def _largest_divisors(values: np.ndarray, limits: np.ndarray | int) -> np.ndarray:
    """:func:`~tvm_hetero.schedules.cpu.common.largest_divisor` of each value (the rules' own)."""
    from tvm_hetero.schedules.cpu.common import largest_divisor

    pairs = zip(values, np.broadcast_to(limits, values.shape), strict=True)
    return np.array([largest_divisor(int(n), int(cap)) for n, cap in pairs], dtype=float)


def _channel_vectorized(col: Mapping[str, np.ndarray]) -> np.ndarray:
    """Which tiles (columns of :data:`FEATURES` ``compute``) the convolution rule vectorizes by
    output channel (:func:`~tvm_hetero.schedules.cpu.conv.channel_tiled`: convolutions with
    rows of 1-5 columns, not 1x1 ones of stride 1 (the matmul rule's); FlexPie's tiles have
    constant weights)."""
    from tvm_hetero.schedules.cpu.conv import channel_tiled

    tiled = [
        channel_tiled(int(w), int(c), int(cap))
        for c, w, cap in zip(col["out_c"], col["inner"], col["lanes"], strict=True)
    ]
    return narrow_convs(col) & np.array(tiled, dtype=bool)


def narrow_convs(col: Mapping[str, np.ndarray]) -> np.ndarray:
    """Which tiles are convolutions (not 1x1 ones of stride 1) with rows of 1-5 columns."""
    from tvm_hetero.schedules.cpu.conv import CHANNEL_VECTOR_MAX_WIDTH

    pointwise = (col["k_h"] == 1) & (col["k_w"] == 1) & (col["stride"] == 1)
    narrow = col["inner"] <= CHANNEL_VECTOR_MAX_WIDTH
    return (col["kind"] == OP_KINDS["conv2d"]) & ~pointwise & narrow


def channel_vectorized(rows: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Which compute ``rows`` the convolution rule vectorizes by output channel (a mask): what
    traces measured before that tile (2026-11-27) timed with the width as the vector."""
    col = dict(zip(FEATURES["compute"], _matrix("compute", rows).T, strict=True))
    return _channel_vectorized(col)


def _vectors(kind: np.ndarray, inner: np.ndarray, lanes: np.ndarray, by_channel) -> np.ndarray:
    """The vector the CPU rules give each tile's rows: a convolution's is that of the width
    ``PadConvolutionOutputs`` widens it to (every lane where it is vectorized by channel), the
    others' the largest divisor of the width."""
    from tvm_hetero.schedules.cpu.conv import vector_width

    widened = [vector_width(int(n), int(cap))[1] for n, cap in zip(inner, lanes, strict=True)]
    convs = np.isin(kind, [OP_KINDS["depthwise"], OP_KINDS["grouped"], OP_KINDS["conv2d"]])
    return np.where(by_channel, lanes, np.where(convs, widened, _largest_divisors(inner, lanes)))


def _channel_tiles(
    kind: np.ndarray, channels: np.ndarray, rows: np.ndarray, inner: np.ndarray, lanes: np.ndarray
) -> np.ndarray:
    """The output channels of the convolution rule's register tile for each tile
    (:func:`~tvm_hetero.schedules.cpu.conv.register_tile` at the widened width; depthwise and
    grouped convolutions have no channel tile: 1)."""
    from tvm_hetero.schedules.cpu.conv import register_tile, vector_width, wide_tile_channels

    out = []
    for k, c, h, w, cap in zip(kind, channels, rows, inner, lanes, strict=True):
        wide, vec = vector_width(int(w), int(cap))
        if k in (OP_KINDS["depthwise"], OP_KINDS["grouped"]):
            out.append(1)
            continue
        pair = wide_tile_channels(32 * int(cap))  # cap: float32 lanes
        out.append(register_tile(int(c), int(h), wide // vec, wide=pair)[0])
    return np.array(out, dtype=float)


def _join_columns(col: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """A join's derived columns (:data:`DERIVED`): the bytes of one contiguous run, and its copy
    loop as the injective rule cuts it
    (:func:`~tvm_hetero.schedules.cpu.common.vectorize_parallel`): its vector (the largest
    divisor of the innermost extent up to the lanes), its steps (float32 elements over the
    vector) and whether every vector lies in one piece (1) or some straddle two, selecting
    lane by lane (0): only where the pieces cut the innermost axis (``axis`` 0) into runs
    that are not whole vectors (pieces of uneven width, one column apart, never all are)."""
    run_bytes = col["bytes"] / np.maximum(col["runs"], 1)
    vector = _largest_divisors(col["inner"], col["lanes"])
    whole = (col["axis"] > 0) | (vector == 1) | (np.mod(run_bytes / 4, vector) == 0)
    return [run_bytes, vector, col["bytes"] / 4 / vector, whole.astype(float)]


def _design(name: str, matrix: np.ndarray) -> Any:
    """The trees' input: ``matrix`` (in :data:`FEATURES` order) with the :data:`DERIVED`
    columns appended."""
    import xgboost as xgb

    col = dict(zip(FEATURES[name], matrix.T, strict=True))
    extra = []
    if name == "compute":
        by_channel = _channel_vectorized(col)
        extra = [
            col["out_c"] * col["out_h"] * col["out_w"],
            col["in_c"] * col["in_h"] * col["in_w"],
            _vectors(col["kind"], col["inner"], col["lanes"], by_channel),
            _channel_tiles(col["kind"], col["out_c"], col["out_h"], col["inner"], col["lanes"]),
            by_channel.astype(float),
        ]
    if name == "rearrange":
        extra = _join_columns(col)
    full = np.column_stack([matrix, *extra]) if extra else matrix
    return xgb.DMatrix(full, feature_names=columns(name))


def work_of(name: str) -> str:
    """What estimator ``name`` learns seconds per (kept with a saved estimator, which is
    refused where it differs)."""
    feature = WORK[name][0]
    return f"{feature} x widened columns" if name == "compute" else feature


def _work(name: str, matrix: np.ndarray) -> np.ndarray:
    feature, floor = WORK[name]
    work = matrix[:, FEATURES[name].index(feature)] + floor
    return work * _widened(matrix) if name == "compute" else work


def _widened(matrix: np.ndarray) -> np.ndarray:
    """Per compute row: the columns the convolution rule computes over those the tile keeps
    (``PadConvolutionOutputs`` widens a row of 4 or more columns to whole vectors,
    :func:`~tvm_hetero.schedules.cpu.conv.vector_width`, as that pass does); 1 for a row
    vectorized by channel, a 1x1 convolution of stride 1 (the matmul rule's) and every other
    operator. A grid tile of ResNet-18 17 columns wide is computed 24 wide:
    on this host it ran 1.5-2.1x the 16-wide tile beside it, where the trees, which had seen
    no 17-wide convolution, priced it 1.05-1.3x; trained on this work instead they price it
    1.4-1.7x (2026-11-27, ``benchmarks/README.md``)."""
    from tvm_hetero.passes.pad_convolution_outputs import gathered_stride
    from tvm_hetero.schedules.cpu.conv import vector_width

    col = dict(zip(FEATURES["compute"], matrix.T, strict=True))
    convs = np.isin(col["kind"], [OP_KINDS["depthwise"], OP_KINDS["grouped"], OP_KINDS["conv2d"]])
    pointwise = (col["k_h"] == 1) & (col["k_w"] == 1) & (col["stride"] == 1)
    strides = [gathered_stride(int(s)) for s in col["stride"]]
    gathered = np.asarray(strides, dtype=bool) & (col["groups"] > 1)
    wide = [
        vector_width(int(n), int(cap), bool(g))[0]
        for n, cap, g in zip(col["inner"], col["lanes"], gathered, strict=True)
    ]
    ratio = np.asarray(wide, dtype=float) / np.maximum(col["inner"], 1.0)
    return np.where(convs & ~pointwise & ~_channel_vectorized(col), ratio, 1.0)


def _matrix(name: str, rows: Sequence[Mapping[str, float]] | np.ndarray) -> np.ndarray:
    if isinstance(rows, np.ndarray):
        return rows.astype(float)
    return np.array([[float(r[f]) for f in FEATURES[name]] for r in rows], dtype=float).reshape(
        len(rows), len(FEATURES[name])
    )


def train(
    name: str, rows: Sequence[Mapping[str, float]], seconds: Sequence[float],
    held_out: float = 0.2, seed: int = 0, rounds: int = ROUNDS, notes: dict | None = None,
) -> Estimator:  # fmt: skip
    """Fit estimator ``name`` on traces (feature rows and measured seconds); ``held_out`` of
    the workloads (at random) are kept out and scored, then the model is refitted on all.

    A workload traced more than once (equal feature rows: two collections, or one trace file
    given twice) is one workload labelled with its median time (:func:`merge_repeats`): a
    label's noise falls, and no workload is both fitted and held out.

    Raises
    ------
    ValueError
        For an unknown estimator, fewer than 5 traces, or a time that is not positive.
    """
    import xgboost as xgb

    if name not in FEATURES:
        raise ValueError(f"unknown estimator {name!r}; known: {sorted(FEATURES)}")
    x, y = _matrix(name, rows), np.asarray(seconds, dtype=float)
    if len(y) < 5 or len(y) != len(x):
        raise ValueError(f"{name}: need at least 5 traces with a time each, got {len(y)}")
    if (y <= 0).any() or not np.isfinite(y).all():
        raise ValueError(f"{name}: every traced time must be positive and finite")
    x, y = merge_repeats(x, y)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    cut = max(1, round(len(y) * held_out))
    test, fit = order[:cut], order[cut:]
    params = {**PARAMS, "seed": seed}

    work = _work(name, x)

    def fitted(idx: np.ndarray) -> Any:
        data = _design(name, x[idx])
        data.set_label(np.log(y[idx] / work[idx]))
        return xgb.train(params, data, num_boost_round=rounds)

    probe = fitted(fit)
    guess = np.exp(probe.predict(_design(name, x[test]))) * work[test]
    mape = float(np.mean(np.abs(guess - y[test]) / y[test]))
    notes = dict(notes or {})
    rules = traced_rules(rows)
    if rules:
        notes["rules"] = rules
    return Estimator(name, fitted(order), mape, len(y), notes)


def traced_rules(rows: Sequence[Mapping[str, float]]) -> dict[str, int]:
    """The newest CPU rules version among traces (rows with ``rules`` and ``lanes``) by their
    vector lanes (as a string: a JSON key); empty where no row says."""
    found: dict[str, int] = {}
    for r in rows:
        if "rules" in r and "lanes" in r:
            lanes = str(int(r["lanes"]))
            found[lanes] = max(found.get(lanes, 0), int(r["rules"]))
    return found


def distinct_workloads(
    name: str, rows: Sequence[Mapping[str, float]], seconds: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Traces of estimator ``name`` as the matrix of its distinct workloads (:data:`FEATURES`
    order) and each one's median time: what :func:`train` fits and holds out."""
    return merge_repeats(_matrix(name, rows), np.asarray(seconds, dtype=float))


def merge_repeats(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One row per distinct feature row of ``x``, labelled with the median of its times in
    ``y`` (rows in order of first appearance)."""
    times: dict[bytes, list[float]] = {}
    first: dict[bytes, int] = {}
    for i, row in enumerate(x):
        key = row.tobytes()
        times.setdefault(key, []).append(float(y[i]))
        first.setdefault(key, i)
    return x[list(first.values())], np.array([float(np.median(t)) for t in times.values()])


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error (a fraction)."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return float(np.mean(np.abs(p - m) / m))


def topology(names: Sequence[str], links: Sequence[tuple[str, str]]) -> str:
    """``ring``, ``ps`` (a star: one device linked to all others, no other links), ``mesh``
    (every pair linked), ``local`` (no links) or ``other``, from a cluster's links."""
    n, pairs = len(names), {frozenset(p) for p in links if p[0] != p[1]}
    if not pairs:
        return "local"
    degree = {d: sum(1 for p in pairs if d in p) for d in names}
    if len(pairs) == n * (n - 1) // 2:
        return "mesh"
    if n >= 3 and len(pairs) == n - 1 and max(degree.values()) == n - 1:
        return "ps"
    if n >= 3 and len(pairs) == n and all(v == 2 for v in degree.values()):
        return "ring"
    return "other"


def conv_gflops(out_c: int, out_h: int, out_w: int, in_c_per_group: int, k_h: int, k_w: int):
    """Multiply-adds of a convolution tile, in units of 1e9 (the ``gflops`` feature)."""
    return 2.0 * out_c * out_h * out_w * in_c_per_group * k_h * k_w / 1e9
