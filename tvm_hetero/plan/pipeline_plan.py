"""PipelinePlan: EdgePipe's plan shape, runs of layers as stages on devices. Pure data."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tvm_hetero.plan.placement import PlanError, check_groups, op_id_groups


@dataclass(frozen=True)
class PipelinePlan:
    """A model cut into pipeline stages, stage ``k`` on device ``k``.

    Attributes
    ----------
    devices : tuple[str, ...]
        The device of each stage, in pipeline order (the first is home: inputs arrive there).
    stages : tuple[tuple[str, ...], ...]
        Operator ids of each stage.
    layers : tuple[tuple[int, int], ...]
        First and last layer of each stage (layers as the planner numbered them).
    strategy : str
        ``edgepipe``, ``gpipe``, ``pipedream`` or ``manual``.
    period_s : float or None
        Predicted period: the slowest stage's ``max(compute, send)``.
    compute_s, send_s : tuple[float, ...]
        Predicted compute and send seconds of each stage (empty when unknown).
    memory_bytes : tuple[int, ...]
        Memory each stage needs (weights and buffers), when known.
    """

    devices: tuple[str, ...]
    stages: tuple[tuple[str, ...], ...]
    layers: tuple[tuple[int, int], ...] = ()
    strategy: str = "edgepipe"
    period_s: float | None = None
    compute_s: tuple[float, ...] = ()
    send_s: tuple[float, ...] = ()
    memory_bytes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.stages or len(self.stages) != len(self.devices):
            raise PlanError(
                f"PipelinePlan: {len(self.stages)} stages need as many devices, got "
                f"{len(self.devices)} ({', '.join(self.devices)})"
            )
        if len(set(self.devices)) != len(self.devices):
            raise PlanError(f"PipelinePlan: a device takes two stages ({', '.join(self.devices)})")
        check_groups(self.stages, "PipelinePlan", "stage", "stages")

    @property
    def predicted_s(self) -> float | None:
        """The predicted period (one microbatch per period in steady state)."""
        return self.period_s

    def assignment(self) -> dict[str, int]:
        """Operator id -> device index, for operators off the first stage's device."""
        return {op: k for k, ops in enumerate(self.stages) if k for op in ops}

    def device_of(self, node_id: str) -> int:
        """Device index (= stage) of an operator (0 when in no stage)."""
        return self._stage_of.get(node_id, 0)

    @functools.cached_property
    def _stage_of(self) -> dict[str, int]:
        return self.assignment()

    def realisation(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that places each stage's operators on its device."""
        return "manual_placement", {"assignment": self.assignment()}

    def units(self) -> tuple[str, dict[str, Any]]:
        """The pass pipeline that carves the placed model into one function per stage."""
        return "pipeline_stages", {"stages": [list(s) for s in self.stages]}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "kind": "pipeline",
            "strategy": self.strategy,
            "devices": list(self.devices),
            "stages": [list(s) for s in self.stages],
            "layers": [list(r) for r in self.layers],
            "period_s": self.period_s,
            "compute_s": list(self.compute_s),
            "send_s": list(self.send_s),
            "memory_bytes": list(self.memory_bytes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelinePlan:
        """Inverse of :meth:`to_dict`."""
        stages = op_id_groups(data, "pipeline", "stages")
        return cls(
            tuple(data["devices"]), stages,
            tuple(tuple(r) for r in data.get("layers", [])), data.get("strategy", "edgepipe"),
            data.get("period_s"), tuple(data.get("compute_s", [])), tuple(data.get("send_s", [])),
            tuple(data.get("memory_bytes", [])),
        )  # fmt: skip
