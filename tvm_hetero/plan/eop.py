"""EOP's planner: key operators, a ratio per operator between two devices, collaborative tuning.

Pure: it reads time models (callables, usually fitted :class:`~tvm_hetero.costmodel.patterns.
Pattern` s), byte counts and transfer fits, and returns a :class:`SplitPlan`. The baselines of the
paper (one device, Equal, Fixed) come out of the same functions, so every comparison goes through
one path: plan -> ``AnnotateOperatorSplits`` -> ``RealizeOperatorSplits`` -> build -> run.

Cost of an operator cut into ``n0`` units on the home device and ``n1`` on the other (Eq. 2; the
other device's shard runs while the home computes its own when ``concurrent``; a copy between two
CPU workers of one process moves no bytes but costs the runtime's measured handoff)::

    T = slice(in) + copy_in(n1) + max(t0(n0), t1(n1)) + copy_out(n1) + concat(out)

and ``AT(G, R) = sum of T over key operators + the rest on the home device`` (Eq. 4). Adjacent key
operators cut the same way keep their shards where they are: the first skips its copy out and
concat, the second its slice and copy in. Choosing every operator's dimension and share with that
coupling is a chain dynamic programme, exact over the ratio grid (Algorithms 2-3 look at pairs of
neighbours; the programme covers every pair at once).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tvm_hetero.plan.placement import PlanError

Seconds = Callable[[float], float]

DEFAULT_SPAN = 0.01
"""Ratio step of the search (the paper's span)."""
DEFAULT_KEY_SHARE = 0.95
"""Key operators are the fewest that together take this share of the time."""


@dataclass(frozen=True)
class Link:
    """How the two devices exchange data.

    Attributes
    ----------
    to_other, to_home : callable
        Seconds to copy ``bytes`` from the home device to the other one, and back.
    local : callable
        Seconds to slice or concatenate ``bytes`` on the home device.
    concurrent : bool
        Whether the two shards of a cut run at the same time (a GPU beside the CPU, two CPU
        workers on disjoint cores); two CPU devices sharing cores run one after the other.
    """

    to_other: Seconds
    to_home: Seconds
    local: Seconds
    concurrent: bool = True


@dataclass(frozen=True)
class DimOption:
    """One partition dimension of a key operator with its time models and byte counts."""

    dim: str
    extent: int
    time: tuple[Seconds, Seconds]
    cut_in_bytes: int
    whole_in_bytes: int
    out_bytes: int
    chains_from: str | None = None
    """The previous key operator's dimension whose output shards this cut reads as they are."""
    chained_bytes: int | None = None
    """Bytes of the cut argument that arrives as shards when chained (default: all cut bytes)."""
    step: int = 1
    """Units a share comes in (the whole extent aside): a CPU kernel's vector of output
    channels or columns, which a share of a part of one computes at the cost of a whole."""


@dataclass(frozen=True)
class KeyOp:
    """A key operator and the ways it can be cut."""

    node_id: str
    op: str
    options: tuple[DimOption, ...]


@dataclass(frozen=True)
class OpSplit:
    """The decision for one operator.

    ``shares`` are units per device in the plan's device order (EOP's: home, other);
    ``(extent, 0, ...)`` keeps it whole on the home device. ``times_s`` follows them.
    """

    node_id: str
    op: str
    dim: str
    extent: int
    shares: tuple[int, ...]
    times_s: tuple[float, ...]
    comm_s: float
    total_s: float
    chained: bool = False

    @property
    def ratios(self) -> tuple[float, ...]:
        """The shares as fractions (EOP's ``(alpha, beta)``)."""
        return tuple(n / self.extent for n in self.shares)

    @property
    def moved(self) -> bool:
        """Whether any unit leaves the home device (the operator is cut or moved)."""
        return any(self.shares[1:])


@dataclass(frozen=True)
class SplitPlan:
    """Key operators cut among devices (the plan shape of EOP and its baselines: two devices).

    Attributes
    ----------
    strategy : str
        ``eop``, ``equal``, ``fixed`` or ``single``.
    devices : tuple[str, ...]
        Home device (inputs, outputs, every other operator) first; shares follow this order.
    splits : tuple[OpSplit, ...]
        One entry per key operator, in program order.
    rest_s : float
        Predicted time of the operators that are not key, on the home device.
    """

    strategy: str
    devices: tuple[str, ...]
    splits: tuple[OpSplit, ...] = ()
    rest_s: float = 0.0
    notes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for s in self.splits:
            if min(s.shares) < 0 or sum(s.shares) != s.extent:
                raise PlanError(
                    f"SplitPlan: operator {s.node_id!r} has shares {s.shares}, which must be "
                    f"non-negative and sum to its extent {s.extent}"
                )
            if any(s.shares[len(self.devices) :]):
                raise PlanError(
                    f"SplitPlan: operator {s.node_id!r} has shares {s.shares} and the plan has "
                    f"only {len(self.devices)} devices"
                )

    @property
    def predicted_s(self) -> float:
        """``AT(G, R)``: the key operators' times plus the rest."""
        return sum(s.total_s for s in self.splits) + self.rest_s

    def annotations(self) -> dict[str, dict[str, Any]]:
        """What ``AnnotateOperatorSplits`` takes: the operators actually cut or moved."""
        return {s.node_id: {"dim": s.dim, "shares": list(s.shares)} for s in self.splits if s.moved}

    def realisation(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that realises this plan and its arguments (besides ``vdevices``)."""
        return "operator_splits", {"splits": self.annotations()}

    def units(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that cuts the placed model into the runtime's units."""
        return "device_units", {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "kind": "split",
            "strategy": self.strategy,
            "devices": list(self.devices),
            "splits": [
                {**s.__dict__, "shares": list(s.shares), "times_s": list(s.times_s)}
                for s in self.splits
            ],
            "rest_s": self.rest_s,
            "predicted_s": self.predicted_s,
            "notes": dict(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SplitPlan:
        """Inverse of :meth:`to_dict`."""
        if data.get("kind") != "split":
            raise PlanError(f"not a split plan: kind is {data.get('kind')!r}")
        splits = tuple(
            OpSplit(**{**s, "shares": tuple(s["shares"]), "times_s": tuple(s["times_s"])})
            for s in data["splits"]
        )
        return cls(
            data["strategy"], tuple(data["devices"]), splits, data["rest_s"],
            data.get("notes", {}),
        )  # fmt: skip

    def to_json(self) -> str:
        """Serialise to JSON text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def key_operators(times: Mapping[str, float], share: float = DEFAULT_KEY_SHARE) -> list[str]:
    """The fewest operators (longest first) whose times add up to ``share`` of the total."""
    if not 0 < share <= 1:
        raise PlanError(f"key_operators: share must be in (0, 1], got {share}")
    total, acc, keys = sum(times.values()), 0.0, []
    for node, t in sorted(times.items(), key=lambda kv: -kv[1]):
        if acc >= share * total:
            break
        keys.append(node)
        acc += t
    return keys


def ratio_grid(extent: int, span: float = DEFAULT_SPAN, step: int = 1) -> list[int]:
    """Units on the other device for every ratio ``0, span, 2 span, ... 1`` (distinct, sorted),
    each a multiple of ``step`` or the whole extent (:func:`in_steps`)."""
    if not 0 < span <= 1:
        raise PlanError(f"ratio_grid: span must be in (0, 1], got {span}")
    steps = round(1 / span)
    return sorted({in_steps(round(extent * k / steps), extent, step) for k in range(steps + 1)})


def in_steps(units: int, extent: int, step: int) -> int:
    """``units`` of ``extent`` to the nearest multiple of ``step``, or ``extent`` itself where
    that is nearer (an extent of fewer than two steps is cut as it is)."""
    if step <= 1 or extent < 2 * step:
        return units
    snapped = min(step * round(units / step), extent)
    return extent if extent - units < abs(units - snapped) else snapped


def split_cost(
    option: DimOption, n1: int, link: Link, linked_in: bool = False, linked_out: bool = False
) -> tuple[float, float, float, float]:
    """``(t0, t1, comm, total)`` of cutting ``option`` with ``n1`` units on the other device.

    ``linked_in``: the cut input arrives as shards (no slice, no copy in for it);
    ``linked_out``: the output stays in shards (no copy out, no concat).
    """
    extent = option.extent
    n0 = extent - n1
    t0 = option.time[0](n0) if n0 else 0.0
    t1 = option.time[1](n1) if n1 else 0.0
    if n1 == 0:
        return t0, t1, 0.0, t0
    cut = option.cut_in_bytes
    if linked_in:
        cut -= option.cut_in_bytes if option.chained_bytes is None else option.chained_bytes
    copy_in = option.whole_in_bytes + cut * n1 / extent
    comm = link.to_other(copy_in) if copy_in else 0.0
    if not linked_out:
        comm += link.to_home(option.out_bytes * n1 / extent)
    if n0:
        comm += link.local(cut) if cut else 0.0
        comm += 0.0 if linked_out else link.local(option.out_bytes)
    compute = max(t0, t1) if link.concurrent else t0 + t1
    return t0, t1, comm, compute + comm


def _states(op: KeyOp, span: float) -> list[tuple[int, int]]:
    return [(i, n1) for i, o in enumerate(op.options) for n1 in ratio_grid(o.extent, span, o.step)]


def _linked(prev: KeyOp, ps: tuple[int, int], op: KeyOp, s: tuple[int, int]) -> bool:
    po, o = prev.options[ps[0]], op.options[s[0]]
    return (
        o.chains_from == po.dim and po.extent == o.extent and ps[1] == s[1] and 0 < s[1] < o.extent
    )


def plan_eop(
    keys: Sequence[KeyOp], link: Link, devices: Sequence[str], rest_s: float = 0.0,
    span: float = DEFAULT_SPAN, collaborative: bool = True,
) -> SplitPlan:  # fmt: skip
    """EOP: the dimension and share of every key operator minimising ``AT(G, R)``.

    With ``collaborative=False`` each operator takes its own best cut (Eq. 5 per operator,
    Condition 1 of the paper); with it, neighbours are tuned together through the chain links.
    """
    if not keys:
        return SplitPlan("eop", tuple(devices), (), rest_s)
    # best[i][s] = (least cost of operators 0..i with operator i in state s, previous state)
    best: list[dict[tuple[int, int], tuple[float, tuple[int, int] | None]]] = []
    for i, op in enumerate(keys):
        own = {s: split_cost(op.options[s[0]], s[1], link)[3] for s in _states(op, span)}
        if i == 0:
            best.append({s: (cost, None) for s, cost in own.items()})
            continue
        prev, prev_op = best[-1], keys[i - 1]
        free = min(prev, key=lambda ps: prev[ps][0])  # the best previous state, unlinked
        dims = {o.dim: k for k, o in enumerate(prev_op.options)}
        layer = {}
        for s, cost in own.items():
            layer[s] = (prev[free][0] + cost, free)
            source = op.options[s[0]].chains_from
            ps = (dims.get(source, -1), s[1])
            if collaborative and ps in prev and _linked(prev_op, ps, op, s):
                linked = prev[ps][0] + cost - _saving(prev_op, ps, op, s, link)
                if linked < layer[s][0]:
                    layer[s] = (linked, ps)
        best.append(layer)
    chosen = [min(best[-1], key=lambda s: best[-1][s][0])]
    for i in range(len(keys) - 1, 0, -1):
        chosen.append(best[i][chosen[-1]][1])
    chosen.reverse()
    return _plan("eop", keys, chosen, link, devices, rest_s, collaborative)


def _saving(prev: KeyOp, ps: tuple[int, int], op: KeyOp, s: tuple[int, int], link: Link) -> float:
    """Time saved when ``prev``'s output shards feed ``op`` as they are."""
    po, o = prev.options[ps[0]], op.options[s[0]]
    before = split_cost(po, ps[1], link)[3] + split_cost(o, s[1], link)[3]
    after = (
        split_cost(po, ps[1], link, linked_out=True)[3]
        + split_cost(o, s[1], link, linked_in=True)[3]
    )
    return before - after


def _plan(
    strategy: str, keys: Sequence[KeyOp], chosen: Sequence[tuple[int, int]], link: Link,
    devices: Sequence[str], rest_s: float, collaborative: bool = True,
    notes: Mapping[str, Any] | None = None,
) -> SplitPlan:  # fmt: skip
    splits = []
    for i, (op, s) in enumerate(zip(keys, chosen, strict=True)):
        option = op.options[s[0]]
        linked_in = collaborative and i > 0 and _linked(keys[i - 1], chosen[i - 1], op, s)
        linked_out = (
            collaborative and i + 1 < len(keys) and _linked(op, s, keys[i + 1], chosen[i + 1])
        )
        t0, t1, comm, total = split_cost(option, s[1], link, linked_in, linked_out)
        shares = (option.extent - s[1], s[1])
        split = OpSplit(
            op.node_id, op.op, option.dim, option.extent, shares, (t0, t1), comm, total, linked_in
        )
        splits.append(split)
    return SplitPlan(strategy, tuple(devices), tuple(splits), rest_s, dict(notes or {}))


def plan_fixed_ratio(
    keys: Sequence[KeyOp], link: Link, devices: Sequence[str], beta: float, rest_s: float = 0.0,
    strategy: str = "fixed",
) -> SplitPlan:  # fmt: skip
    """Every key operator cut with share ``beta`` on the other device, on its best dimension.

    ``beta = 0.5`` is the paper's Equal baseline; ``beta = s / (1 + s)`` with ``s`` the model's
    speedup of the other device over the home device is Fixed; ``beta = 0`` runs every operator on
    the home device (the single-device baseline).
    """
    if not 0 <= beta <= 1:
        raise PlanError(f"plan_fixed_ratio: beta must be in [0, 1], got {beta}")
    chosen = []
    for op in keys:
        states = [(i, in_steps(round(o.extent * beta), o.extent, o.step))
                  for i, o in enumerate(op.options)]  # fmt: skip
        cost = {s: split_cost(op.options[s[0]], s[1], link)[3] for s in states}
        chosen.append(min(states, key=cost.__getitem__))
    return _plan(strategy, keys, chosen, link, devices, rest_s, False, {"beta": beta})
