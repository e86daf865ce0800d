"""SpatialPlan: FlexPie's plan shape, runs of layers cut into spatial tiles. Pure data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm_hetero.plan.placement import PlanError, check_groups, op_id_groups

SPATIAL_SCHEMES = ("InH", "InW", "OutC", "Grid", "Home")
"""What a segment may use (``tvm_hetero.ir.tiles.SCHEMES``; kept here so plans stay pure)."""


@dataclass(frozen=True)
class SpatialPlan:
    """A model as segments of layers, each cut over every device by one scheme.

    Attributes
    ----------
    devices : tuple[str, ...]
        The devices the tiles run on, home first (inputs arrive and outputs leave there).
    segments : tuple[tuple[str, ...], ...]
        Operator ids of each segment, in program order: its layers are NT but the last (no
        exchange inside a segment; the halo is computed on each device).
    schemes : tuple[str, ...]
        The scheme of each segment (``InH``, ``InW``, ``OutC``, ``Grid`` or ``Home``).
    layers : tuple[tuple[int, int], ...]
        First and last layer of each segment (layers as the planner numbered them).
    strategy : str
        ``flexpie``, ``fixed-InH``, ``layerwise``, ``fused-Grid``... or ``manual``.
    predicted_s : float or None
        Predicted latency (moves, computes and the final gather, one after another).
    """

    devices: tuple[str, ...]
    segments: tuple[tuple[str, ...], ...]
    schemes: tuple[str, ...]
    layers: tuple[tuple[int, int], ...] = ()
    strategy: str = "flexpie"
    predicted_s: float | None = None

    def __post_init__(self) -> None:
        if not self.devices or len(set(self.devices)) != len(self.devices):
            raise PlanError(f"SpatialPlan: devices must be distinct, got {list(self.devices)}")
        if not self.segments or len(self.schemes) != len(self.segments):
            raise PlanError(
                f"SpatialPlan: {len(self.segments)} segments need as many schemes, got "
                f"{len(self.schemes)}"
            )
        bad = sorted(set(self.schemes) - set(SPATIAL_SCHEMES))
        if bad:
            raise PlanError(f"SpatialPlan: unknown schemes {bad}; allowed: {list(SPATIAL_SCHEMES)}")
        check_groups(self.segments, "SpatialPlan", "segment", "segments")

    def realisation(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that cuts each segment into tiles on the devices."""
        segments = [
            {"ops": list(ops), "scheme": s}
            for ops, s in zip(self.segments, self.schemes, strict=True)
        ]
        return "spatial_tiles", {"segments": segments}

    def units(self) -> tuple[str, dict[str, Any]]:
        """Runs of one device's bindings become its units (tiles run at the same time)."""
        return "device_units", {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "kind": "spatial",
            "strategy": self.strategy,
            "devices": list(self.devices),
            "segments": [list(s) for s in self.segments],
            "schemes": list(self.schemes),
            "layers": [list(r) for r in self.layers],
            "predicted_s": self.predicted_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpatialPlan:
        """Inverse of :meth:`to_dict`."""
        segments = op_id_groups(data, "spatial", "segments")
        return cls(
            tuple(data["devices"]), segments, tuple(data["schemes"]),
            tuple(tuple(r) for r in data.get("layers", [])), data.get("strategy", "flexpie"),
            data.get("predicted_s"),
        )  # fmt: skip
