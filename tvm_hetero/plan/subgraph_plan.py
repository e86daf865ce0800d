"""SubgraphPlan: DUET's plan shape, coarse subgraphs each on one device. Pure data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm_hetero.plan.placement import PlanError, op_id_groups


@dataclass(frozen=True)
class SubgraphPlan:
    """Subgraphs of a model, each on one device; the runtime runs each as a unit of its own.

    Attributes
    ----------
    devices : tuple[str, ...]
        Device names, home first (inputs and outputs live there).
    subgraphs : tuple[tuple[str, ...], ...]
        Operator ids of each subgraph, in phase order.
    placement : tuple[int, ...]
        Device index of each subgraph.
    phase : tuple[int, ...]
        Phase of each subgraph (subgraphs of one multi-path phase share it).
    strategy : str
        ``duet``, ``duet-fallback`` (one device was measured faster), or a baseline's name.
    predicted_s, measured_s : float or None
        The cost model's time and the measured end-to-end time, when known.
    """

    devices: tuple[str, ...]
    subgraphs: tuple[tuple[str, ...], ...]
    placement: tuple[int, ...]
    phase: tuple[int, ...]
    strategy: str = "duet"
    predicted_s: float | None = None
    measured_s: float | None = None

    def __post_init__(self) -> None:
        if not self.devices:
            raise PlanError("SubgraphPlan: devices must list at least one device")
        if not (len(self.subgraphs) == len(self.placement) == len(self.phase)):
            raise PlanError(
                f"SubgraphPlan: {len(self.subgraphs)} subgraphs but {len(self.placement)} "
                f"placements and {len(self.phase)} phases"
            )
        bad = [d for d in self.placement if not (isinstance(d, int) and 0 <= d < len(self.devices))]
        if bad:
            raise PlanError(
                f"SubgraphPlan: device index {bad[0]!r} is not in 0..{len(self.devices) - 1} "
                f"({', '.join(self.devices)})"
            )

    def assignment(self) -> dict[str, int]:
        """Operator id -> device index, for operators off the home device."""
        return {
            n: d
            for nodes, d in zip(self.subgraphs, self.placement, strict=True)
            for n in nodes
            if d
        }

    def device_of(self, node_id: str) -> int:
        """Device index of an operator (0 when in no subgraph)."""
        return self.assignment().get(node_id, 0)

    def realisation(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that places the operators (besides ``vdevices``)."""
        return "manual_placement", {"assignment": self.assignment()}

    def units(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that cuts the placed model into the runtime's units: one per
        subgraph."""
        return "subgraph_units", {"subgraphs": [list(s) for s in self.subgraphs]}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "kind": "subgraphs",
            "strategy": self.strategy,
            "devices": list(self.devices),
            "subgraphs": [list(s) for s in self.subgraphs],
            "placement": list(self.placement),
            "phase": list(self.phase),
            "predicted_s": self.predicted_s,
            "measured_s": self.measured_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubgraphPlan:
        """Inverse of :meth:`to_dict`."""
        subgraphs = op_id_groups(data, "subgraphs", "subgraphs")
        return cls(
            tuple(data["devices"]), subgraphs,
            tuple(data["placement"]), tuple(data["phase"]), data.get("strategy", "duet"),
            data.get("predicted_s"), data.get("measured_s"),
        )  # fmt: skip
