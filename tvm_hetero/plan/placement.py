"""Placement: which device each operator runs on (the plan shape of explicit and ALS placement).

Pure data and pure functions: no IR, no measurement.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class PlanError(ValueError):
    """A plan that cannot be made or applied."""


def op_id_groups(data: Mapping[str, Any], kind: str, field: str) -> tuple[tuple[str, ...], ...]:
    """``data[field]`` of a plan's JSON form as groups of operator ids, after checking that
    ``data`` is a plan of ``kind`` and the field is lists of strings."""
    if data.get("kind") != kind:
        raise PlanError(f"not a {kind} plan: kind is {data.get('kind')!r}")
    groups = data[field]
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and all(isinstance(n, str) for n in g) for g in groups
    ):
        raise PlanError(f"{kind} plan: {field} must be lists of operator ids")
    return tuple(tuple(g) for g in groups)


def check_groups(groups: Sequence[Sequence[str]], owner: str, one: str, many: str) -> None:
    """Every group of a plan has operators and no operator is in two groups; errors name
    ``owner`` (the plan class) and the group (``one`` / ``many``: ``stage`` / ``stages``)."""
    seen: dict[str, int] = {}
    for k, ops in enumerate(groups):
        if not ops:
            raise PlanError(f"{owner}: {one} {k} has no operators")
        for op in ops:
            if op in seen:
                raise PlanError(f"{owner}: operator {op!r} is in {many} {seen[op]} and {k}")
            seen[op] = k


@dataclass(frozen=True)
class Placement:
    """Operator -> device assignment.

    Attributes
    ----------
    devices : tuple[str, ...]
        Device names in vdevice order; index 0 is the home device (inputs, outputs, the rest).
    assignment : Mapping[str, int]
        Op node id -> index into ``devices``. Unlisted operators run on device 0.
    strategy : str
        Who made the plan (``manual``, ``als``...).
    predicted_s : float or None
        The planner's predicted end-to-end time, when it has a cost model.
    """

    devices: tuple[str, ...]
    assignment: Mapping[str, int] = field(default_factory=dict)
    strategy: str = "manual"
    predicted_s: float | None = None

    def __post_init__(self) -> None:
        if not self.devices:
            raise PlanError("Placement: devices must list at least one device")
        for node, index in self.assignment.items():
            if not (isinstance(index, int) and 0 <= index < len(self.devices)):
                raise PlanError(
                    f"Placement: operator {node!r} is assigned device index {index!r}; "
                    f"valid indices are 0..{len(self.devices) - 1} ({', '.join(self.devices)})"
                )

    @classmethod
    def of(
        cls, devices: Sequence[str], assignment: Mapping[str, int], strategy: str = "manual",
        predicted_s: float | None = None,
    ) -> Placement:  # fmt: skip
        """A placement from a full assignment: operators on the home device go unlisted."""
        moved = {o: d for o, d in assignment.items() if d != 0}
        return cls(tuple(devices), moved, strategy, predicted_s)

    def device_of(self, node_id: str) -> int:
        """Device index of an operator (0 when unlisted)."""
        return self.assignment.get(node_id, 0)

    def realisation(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that realises this plan and its arguments (besides ``vdevices``)."""
        return "manual_placement", {"assignment": dict(self.assignment)}

    def units(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that cuts the placed model into the runtime's units."""
        return "device_units", {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "kind": "placement",
            "strategy": self.strategy,
            "devices": list(self.devices),
            "assignment": dict(self.assignment),
            "predicted_s": self.predicted_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        """Inverse of :meth:`to_dict`."""
        if data.get("kind") != "placement":
            raise PlanError(f"not a placement plan: kind is {data.get('kind')!r}")
        return cls(
            tuple(data["devices"]), dict(data["assignment"]), data.get("strategy", "manual"),
            data.get("predicted_s"),
        )  # fmt: skip

    def to_json(self) -> str:
        """Serialise to JSON text."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def normalize_op_type(name: str) -> str:
    """``matmul`` / ``nn.conv2d`` / ``relax.matmul`` -> ``relax.matmul`` / ``relax.nn.conv2d``."""
    return name if name.startswith("relax.") else f"relax.{name}"


def place_by_op_type(
    ops: Sequence[tuple[str, str]], rules: Mapping[str, int], devices: Sequence[str]
) -> Placement:
    """Put every operator of a listed type on its device; the rest stay on device 0.

    Parameters
    ----------
    ops : Sequence[tuple[str, str]]
        ``(node_id, op_type)`` of every operator, in topological order.
    rules : Mapping[str, int]
        Op type (``matmul``, ``relax.nn.conv2d``) -> device index.
    devices : Sequence[str]
        Device names in vdevice order.
    """
    present = {op for _, op in ops}
    norm = {normalize_op_type(k): v for k, v in rules.items()}
    missing = sorted(set(norm) - present)
    if missing:
        raise PlanError(
            f"--place: op type(s) {', '.join(missing)} do not occur in the model; "
            f"its op types are {', '.join(sorted(present))}"
        )
    assignment = {node: norm[op] for node, op in ops if op in norm and norm[op] != 0}
    return Placement(tuple(devices), assignment, "manual")


def summarize(
    ops: Sequence[tuple[str, int | None]],
    edges: Sequence[tuple[str, str, int | None]],
    placement: Placement,
) -> list[dict[str, Any]]:
    """Per device: operators, FLOPs, share of FLOPs, and bytes copied in from other devices.

    Parameters
    ----------
    ops : Sequence[tuple[str, int | None]]
        ``(node_id, flops)`` of every operator.
    edges : Sequence[tuple[str, str, int | None]]
        ``(producer, consumer, bytes)`` of every tensor edge.
    placement : Placement
        The plan.
    """
    rows = [
        {"device": name, "ops": 0, "flops": 0, "copies_in": 0, "bytes_in": 0}
        for name in placement.devices
    ]
    for node, flops in ops:
        row = rows[placement.device_of(node)]
        row["ops"] += 1
        row["flops"] += flops or 0
    for src, dst, nbytes in edges:
        if placement.device_of(src) != placement.device_of(dst):
            rows[placement.device_of(dst)]["copies_in"] += 1
            rows[placement.device_of(dst)]["bytes_in"] += nbytes or 0
    total = sum(r["flops"] for r in rows) or 1
    for r in rows:
        r["flops_share"] = r["flops"] / total
    return rows
