"""EdgePipe's pipeline partition (paper Sec. 3.3, Eq. 3, Algorithm 1) and its baselines.

Pure: layer costs, device memories and links in; stages (a run of layers on one device each) out.
A stage's period is ``max(compute, send)`` (compute and communication overlap, Eq. 2); the
pipeline's period is its slowest stage's, and throughput is one microbatch per period. The last
stage sends nothing (its result goes to the client).

The DP state is ``h(i, S, u)``: the least bottleneck with layers ``1..i`` placed on the devices
``S``, device ``u`` taking the next stage. Devices that are interchangeable (same layer times,
memory, and bandwidth to every other device) form one *category*, and ``S`` only counts how
many of each category are used (the reduction of PipeEdge's scheduler): with every device
distinct it is the paper's ``2^D`` DP, with 64 devices of 4 kinds it is ``17^4`` count vectors.
The DP is vectorised over ``S``.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BUFFERS_IN = 2
BUFFERS_OUT = 2
"""Microbatches a stage holds while it receives and sends (PipeEdge's defaults)."""
LOAD_COPIES = 3
"""Copies of a stage's weights its worker holds at once while it loads the stage's library
(TVM 0.27's loader reads the constants out of the library's bytes; they settle to one copy):
a stage whose weights fit its device only once loaded would be killed on loading
(``tests/runtime/test_library_load_memory.py`` measures it)."""


@dataclass(frozen=True)
class PipelineProblem:
    """What the partition needs, measured or predicted.

    Attributes
    ----------
    layer_s : tuple[tuple[float, ...], ...]
        ``layer_s[d][l]``: seconds of layer ``l`` for one microbatch on device ``d``.
    out_bytes : tuple[int, ...]
        Bytes of the one tensor after layer ``l`` (what a cut there sends).
    in_bytes : int
        Bytes of the model's input (what the first stage receives).
    weight_bytes : tuple[int, ...]
        Bytes of layer ``l``'s weights.
    work_bytes : tuple[int, ...]
        Bytes layer ``l`` needs while it runs besides its input and output (its largest
        intermediate tensor).
    memory : tuple[float | None, ...]
        Memory of device ``d`` in bytes (``None``: no limit).
    bandwidth : tuple[tuple[float, ...], ...]
        ``bandwidth[a][b]``: bytes per second from device ``a`` to ``b`` (``inf``: free).
    latency : tuple[tuple[float, ...], ...] or None
        ``latency[a][b]``: seconds per message (``None``: none, as the paper).
    names : tuple[str, ...]
        Device names.
    """

    layer_s: tuple[tuple[float, ...], ...]
    out_bytes: tuple[int, ...]
    in_bytes: int
    weight_bytes: tuple[int, ...]
    work_bytes: tuple[int, ...]
    memory: tuple[float | None, ...]
    bandwidth: tuple[tuple[float, ...], ...]
    latency: tuple[tuple[float, ...], ...] | None = None
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n, layers = len(self.layer_s), len(self.out_bytes)
        if n == 0 or layers == 0:
            raise ValueError("PipelineProblem: needs at least one device and one layer")
        for what, rows in (("layer_s", self.layer_s), ("bandwidth", self.bandwidth)):
            width = layers if what == "layer_s" else n
            if len(rows) != n or any(len(r) != width for r in rows):
                raise ValueError(f"PipelineProblem: {what} must be {n} rows of {width}")
        if len(self.weight_bytes) != layers or len(self.work_bytes) != layers:
            raise ValueError(f"PipelineProblem: weight_bytes and work_bytes need {layers} entries")
        if len(self.memory) != n:
            raise ValueError(f"PipelineProblem: memory needs {n} entries")
        if not self.names:
            object.__setattr__(self, "names", tuple(f"d{k}" for k in range(n)))

    @property
    def n_devices(self) -> int:
        """Number of devices."""
        return len(self.layer_s)

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return len(self.out_bytes)

    def compute_s(self, first: int, last: int, d: int) -> float:
        """Seconds of layers ``first..last`` (inclusive) on device ``d``."""
        return float(sum(self.layer_s[d][first : last + 1]))

    def send_s(self, last: int, a: int, b: int) -> float:
        """Seconds to send the tensor after layer ``last`` from device ``a`` to ``b``."""
        if a == b:
            return 0.0
        lat = self.latency[a][b] if self.latency else 0.0
        return lat + self.out_bytes[last] / self.bandwidth[a][b]

    def stage_bytes(self, first: int, last: int) -> int:
        """Memory a stage of layers ``first..last`` needs: ``LOAD_COPIES`` times its weights
        while it loads, then its weights, ``BUFFERS_IN`` inputs, ``BUFFERS_OUT`` outputs, and
        the largest working set of its layers, whichever is more."""
        inp = self.in_bytes if first == 0 else self.out_bytes[first - 1]
        weights = sum(self.weight_bytes[first : last + 1])
        running = (
            weights + BUFFERS_IN * inp
            + BUFFERS_OUT * self.out_bytes[last] + max(self.work_bytes[first : last + 1])
        )  # fmt: skip
        return max(LOAD_COPIES * weights, running)

    def fits(self, first: int, last: int, d: int) -> bool:
        """Whether layers ``first..last`` fit device ``d``'s memory."""
        cap = self.memory[d]
        return cap is None or self.stage_bytes(first, last) <= cap


@dataclass(frozen=True)
class Stage:
    """Layers ``first..last`` (inclusive) on device ``device``, with their predicted costs."""

    first: int
    last: int
    device: int
    compute_s: float
    send_s: float
    memory_bytes: int
    fits: bool

    @property
    def period_s(self) -> float:
        """``max(compute, send)``: compute and communication overlap."""
        return max(self.compute_s, self.send_s)


@dataclass(frozen=True)
class Partition:
    """A pipeline: its stages in order, and its predicted period (``inf`` when a stage does not
    fit its device's memory)."""

    stages: tuple[Stage, ...]
    period_s: float

    @property
    def devices(self) -> tuple[int, ...]:
        """Device of each stage."""
        return tuple(s.device for s in self.stages)

    @property
    def latency_s(self) -> float:
        """One microbatch through every stage and link (no queueing)."""
        return sum(s.compute_s + s.send_s for s in self.stages)

    @property
    def feasible(self) -> bool:
        """Every stage fits its device."""
        return all(s.fits for s in self.stages)


def evaluate(problem: PipelineProblem, cuts: Sequence[tuple[int, int, int]]) -> Partition:
    """The partition of stages ``(first, last, device)``: consecutive, covering every layer, on
    distinct devices."""
    if not cuts or cuts[0][0] != 0 or cuts[-1][1] != problem.n_layers - 1:
        raise ValueError(f"evaluate: stages {list(cuts)} do not cover layers 0..L-1")
    if any(b[0] != a[1] + 1 for a, b in itertools.pairwise(cuts)):
        raise ValueError(f"evaluate: stages {list(cuts)} are not consecutive")
    devices = [d for _, _, d in cuts]
    if len(set(devices)) != len(devices):
        raise ValueError(f"evaluate: a device takes two stages ({devices})")
    stages = []
    for k, (first, last, d) in enumerate(cuts):
        send = problem.send_s(last, d, cuts[k + 1][2]) if k + 1 < len(cuts) else 0.0
        stages.append(
            Stage(
                first, last, d, problem.compute_s(first, last, d), send,
                problem.stage_bytes(first, last), problem.fits(first, last, d),
            )
        )  # fmt: skip
    period = max(s.period_s for s in stages) if all(s.fits for s in stages) else float("inf")
    return Partition(tuple(stages), period)


def categories(problem: PipelineProblem) -> list[list[int]]:
    """Devices grouped so that swapping two of a group changes no cost (same layer times and
    memory, same bandwidth and latency to and from every other device, and between them)."""

    def same(a: int, b: int) -> bool:
        p = problem
        if p.layer_s[a] != p.layer_s[b] or p.memory[a] != p.memory[b]:
            return False
        tables = [p.bandwidth] + ([p.latency] if p.latency else [])
        others = [x for x in range(p.n_devices) if x not in (a, b)]
        return all(
            t[a][x] == t[b][x] and t[x][a] == t[x][b] and t[a][b] == t[b][a]
            for t in tables
            for x in others
        ) and all(t[a][b] == t[b][a] for t in tables)

    groups: list[list[int]] = []
    for d in range(problem.n_devices):
        home = next((g for g in groups if same(g[0], d)), None)
        if home is None:
            groups.append([d])
        else:
            home.append(d)
    return groups


def edgepipe(problem: PipelineProblem, group: bool = True) -> Partition:
    """The partition with the least period (Eq. 3 over device categories): which devices, in
    which order, which layers each; devices may be left out.

    Two prunings keep it exact: a state or a stage slower than a known partition (the best of
    each device alone and of speed-proportional splits over the fastest devices) cannot be on
    the optimum's path, and a stage's compute only grows as it takes more layers.

    Parameters
    ----------
    problem : PipelineProblem
        Layers, devices and links.
    group : bool
        Count interchangeable devices by category (``False``: every device its own, the
        paper's naive ``2^D`` DP; the same optimum, slower).

    Raises
    ------
    ValueError
        When no partition fits the devices' memories.
    """
    groups = categories(problem) if group else [[d] for d in range(problem.n_devices)]
    counts = np.array([len(g) for g in groups])
    kinds, layers = len(groups), problem.n_layers
    rep = [g[0] for g in groups]
    stride = np.concatenate([[1], np.cumprod(counts + 1)[:-1]]).astype(np.int64)
    size = int(np.prod(counts + 1))
    used = (np.arange(size)[:, None] // stride[None, :]) % (counts + 1)[None, :]
    room = used < counts[None, :]  # room[s, t]: state s can still take a device of kind t
    bound = _upper_bound(problem)
    # stage[u][i]: compute of layers i..j on kind u for each j, and the same with ``inf``
    # where they do not fit
    stage = [[_stage_row(problem, rep[u], i) for i in range(layers)] for u in range(kinds)]
    send = [[_pair_send(problem, groups, u, v) for v in range(kinds)] for u in range(kinds)]
    sends = [np.stack(send[u], axis=1) for u in range(kinds)]  # sends[u][j, v]
    # h[i, s, u]: least bottleneck with layers 0..i-1 placed on the devices counted by s and a
    # device of kind u taking the next stage
    h = np.full((layers + 1, size, kinds), np.inf)
    h[0, 0, :] = np.where(room[0], 0.0, np.inf)
    best, best_at = np.inf, None
    for i in range(layers):
        for u in range(kinds):
            ok = (h[i, :, u] <= bound) & room[:, u]
            if not ok.any():
                continue
            idx = np.nonzero(ok)[0]
            vals, nxt = h[i, idx, u], idx + stride[u]
            compute, row = stage[u][i]
            if np.isfinite(row[-1]) and max(vals.min(), row[-1]) < best:
                best = max(float(vals.min()), float(row[-1]))
                best_at = (i, u)
                bound = min(bound, best)
            span = int(np.searchsorted(compute[:-1], bound, side="right"))  # compute grows
            if span == 0:
                continue
            # every next kind at once: period[j, v], candidates[j, state, v]
            period = np.maximum(row[:span, None], sends[u][i : i + span, :])
            cand = np.maximum(vals[None, :, None], period[:, None, :])
            cand = np.where(room[nxt][None, :, :], cand, np.inf)
            block = h[i + 1 : i + 1 + span, nxt, :]
            h[i + 1 : i + 1 + span, nxt, :] = np.minimum(block, cand)
    if best_at is None:
        need = min(problem.stage_bytes(j, j) for j in range(problem.n_layers))
        caps = [m for m in problem.memory if m is not None]
        raise ValueError(
            f"edgepipe: no partition fits the devices' memories (largest "
            f"{max(caps) / 2**20:.1f} MiB; the smallest layer alone needs "
            f"{need / 2**20:.1f} MiB with its buffers); add devices or memory"
        )
    return evaluate(problem, _backtrack(problem, h, best, best_at, groups, stride, stage, send))


def _stage_row(problem: PipelineProblem, d: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Compute of layers ``first..j`` on device ``d`` for each ``j`` (a running sum, as
    :meth:`PipelineProblem.compute_s` sums; never less for a longer stage), and the same with
    ``inf`` where the stage does not fit (a longer stage may fit where a shorter does not: its
    output can be smaller)."""
    compute = np.cumsum(np.array(problem.layer_s[d][first:], dtype=np.float64))
    cap = problem.memory[d]
    if cap is None:
        return compute, compute
    inp = problem.in_bytes if first == 0 else problem.out_bytes[first - 1]
    weights = np.cumsum(np.array(problem.weight_bytes[first:], dtype=np.int64))
    running = (
        weights + BUFFERS_IN * inp
        + BUFFERS_OUT * np.array(problem.out_bytes[first:], dtype=np.int64)
        + np.maximum.accumulate(np.array(problem.work_bytes[first:], dtype=np.int64))
    )  # fmt: skip
    need = np.maximum(LOAD_COPIES * weights, running)
    return compute, np.where(need <= cap, compute, np.inf)


def _pair_send(problem: PipelineProblem, groups: list[list[int]], u: int, v: int) -> np.ndarray:
    """Seconds to send the tensor after each layer from a device of kind ``u`` to one of kind
    ``v`` (two members of one kind when ``u == v``)."""
    a = groups[u][0]
    if u == v and len(groups[v]) == 1:
        return np.full(problem.n_layers, np.inf)
    b = groups[v][1] if u == v else groups[v][0]
    return np.array([problem.send_s(j, a, b) for j in range(problem.n_layers)])


def _upper_bound(problem: PipelineProblem) -> float:
    """The period of a known partition: each device alone, and the ``k`` fastest devices with
    layers split in proportion to their speed, for every ``k``."""
    layers = problem.n_layers
    totals = [problem.compute_s(0, layers - 1, d) for d in range(problem.n_devices)]
    order = sorted(range(problem.n_devices), key=totals.__getitem__)
    bound = min(
        (evaluate(problem, [(0, layers - 1, d)]).period_s for d in range(problem.n_devices)),
        default=np.inf,
    )
    for k in range(2, min(problem.n_devices, layers) + 1):
        rates = np.array([1.0 / max(totals[d], 1e-30) for d in order[:k]])
        edges = np.round(np.cumsum(rates) / rates.sum() * layers).astype(int)
        edges = np.maximum.accumulate(np.minimum(np.maximum(edges, np.arange(1, k + 1)), layers))
        edges[-1] = layers
        bounds = [0, *edges.tolist()]
        runs = [(bounds[s], bounds[s + 1] - 1) for s in range(k) if bounds[s + 1] > bounds[s]]
        stages = [(a, b, d) for (a, b), d in zip(runs, order, strict=False)]
        bound = min(bound, evaluate(problem, stages).period_s)
    return float(bound)


def _backtrack(
    problem, h, best, best_at, groups, stride, stage, send
) -> list[tuple[int, int, int]]:
    """Stages of the optimum, each kind's devices handed out in order."""
    layers, kinds = problem.n_layers, len(groups)
    counts = [len(g) for g in groups]

    def count(state: int, t: int) -> int:
        return (state // int(stride[t])) % (counts[t] + 1)

    i, u = best_at
    last = np.maximum(h[i, :, u], stage[u][i][1][-1])
    free = (np.arange(h.shape[1]) // int(stride[u])) % (counts[u] + 1) < counts[u]
    state = int(np.nonzero((last == best) & free)[0][0])
    chosen = [(i, layers - 1, u)]
    while i > 0:
        target = h[i, state, u]
        found = next(
            (
                (i0, u0, state - int(stride[u0]))
                for i0 in range(i)
                for u0 in range(kinds)
                if count(state, u0) > 0
                and max(
                    h[i0, state - int(stride[u0]), u0],
                    max(stage[u0][i0][1][i - 1 - i0], send[u0][u][i - 1]),
                ) == target
            ),
            None,
        )  # fmt: skip
        assert found is not None, "edgepipe: backtracking lost the optimum"
        i0, u0, state = found
        chosen.append((i0, i - 1, u0))
        i, u = i0, u0
    chosen.reverse()
    handed = [0] * kinds
    stages = []
    for first, last_layer, kind in chosen:
        stages.append((first, last_layer, groups[kind][handed[kind]]))
        handed[kind] += 1
    return stages


# -- baselines and brute force ------------------------------------------------------------------


def even_split(layers: int, stages: int) -> list[tuple[int, int]]:
    """GPipe's partition: ``stages`` runs of layers as equal in count as can be."""
    stages = min(stages, layers)
    bounds = [round(k * layers / stages) for k in range(stages + 1)]
    return [(bounds[k], bounds[k + 1] - 1) for k in range(stages)]


def gpipe(problem: PipelineProblem, order: Sequence[int]) -> Partition:
    """GPipe's even partition over the devices in ``order`` (every device a stage)."""
    runs = even_split(problem.n_layers, len(order))
    return evaluate(problem, [(a, b, d) for (a, b), d in zip(runs, order, strict=False)])


def pipedream(problem: PipelineProblem, order: Sequence[int]) -> Partition:
    """PipeDream's partitioner: its DP for identical workers (each layer's time the mean over the
    devices, one bandwidth, the mean link) balances ``len(order)`` stages, which are then laid on
    the devices in ``order``, as the paper ran it (forward only, no replication)."""
    layers, n = problem.n_layers, min(len(order), problem.n_layers)
    mean_s = [float(np.mean([problem.layer_s[d][j] for d in order])) for j in range(layers)]
    links = [
        problem.bandwidth[a][b] for a in order for b in order if a != b
    ] or [float("inf")]  # fmt: skip
    bw = float(np.mean(links))
    prefix = np.concatenate([[0.0], np.cumsum(mean_s)])
    # a[j][m]: least bottleneck of layers 0..j-1 in m stages
    a = np.full((layers + 1, n + 1), np.inf)
    cut = np.zeros((layers + 1, n + 1), dtype=np.int64)
    a[0][0] = 0.0
    for j in range(1, layers + 1):
        for m in range(1, min(j, n) + 1):
            for i in range(m - 1, j):
                send = problem.out_bytes[j - 1] / bw if j < layers else 0.0
                c = max(a[i][m - 1], prefix[j] - prefix[i], send)
                if c < a[j][m]:
                    a[j][m], cut[j][m] = c, i
    runs, j = [], layers
    for m in range(n, 0, -1):
        i = int(cut[j][m])
        runs.append((i, j - 1))
        j = i
    runs.reverse()
    return evaluate(problem, [(a, b, d) for (a, b), d in zip(runs, order, strict=False)])


def random_orders(n_devices: int, count: int, seed: int = 0) -> list[list[int]]:
    """``count`` random device orders (the paper's 10 for GPipe and PipeDream)."""
    rng = random.Random(seed)
    orders = []
    for _ in range(count):
        order = list(range(n_devices))
        rng.shuffle(order)
        orders.append(order)
    return orders


def brute_force(problem: PipelineProblem) -> float:
    """The least period over every ordered choice of devices and every cut (tests only)."""
    best = float("inf")
    layers = problem.n_layers
    for k in range(1, min(problem.n_devices, layers) + 1):
        for bounds in itertools.combinations(range(1, layers), k - 1):
            edges = (0, *bounds, layers)
            runs = [(edges[s], edges[s + 1] - 1) for s in range(k)]
            for devices in itertools.permutations(range(problem.n_devices), k):
                stages = [(a, b, d) for (a, b), d in zip(runs, devices, strict=True)]
                best = min(best, evaluate(problem, stages).period_s)
    return best
