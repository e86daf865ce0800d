"""Plans by kind: one JSON form for every strategy's plan, tied to the model it was made for."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from tvm_hetero.plan.eop import SplitPlan
from tvm_hetero.plan.pipeline_plan import PipelinePlan
from tvm_hetero.plan.placement import Placement, PlanError
from tvm_hetero.plan.spatial_plan import SpatialPlan
from tvm_hetero.plan.subgraph_plan import SubgraphPlan


class Plan(Protocol):
    """What every plan offers: a kind, its devices (home first), a JSON form (read back by its
    kind's ``from_dict``) and the pipeline that realises it."""

    devices: tuple[str, ...]
    strategy: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form with a ``kind`` field."""

    def realisation(self) -> tuple[str, dict[str, Any]]:
        """The named pass pipeline (:mod:`tvm_hetero.pipelines`) that realises the plan, with its
        arguments besides ``vdevices``."""

    def units(self) -> tuple[str, dict[str, Any]]:
        """The named pass pipeline that cuts the placed model into the runtime's units."""

    @property
    def predicted_s(self) -> float | None:
        """The planner's predicted time, when it has one."""


PLAN_KINDS: dict[str, Any] = {
    "placement": Placement,
    "split": SplitPlan,
    "subgraphs": SubgraphPlan,
    "pipeline": PipelinePlan,
    "spatial": SpatialPlan,
}
"""``kind`` field -> plan class (each has ``from_dict``); a new strategy adds its kind here."""


def plan_from_dict(data: Any, where: str = "plan") -> Plan:
    """The plan of a JSON object, whatever its kind; errors name ``where`` and what is allowed."""
    if not isinstance(data, Mapping):
        raise PlanError(f"{where}: a plan is a JSON object, got {type(data).__name__}")
    kind = data.get("kind")
    if kind not in PLAN_KINDS:
        raise PlanError(f"{where}: kind {kind!r} is not one of {sorted(PLAN_KINDS)}")
    try:
        return PLAN_KINDS[kind].from_dict(data)
    except (KeyError, TypeError) as err:
        raise PlanError(f"{where}: a {kind} plan needs field {err}") from None


def save_plan(plan: Plan, model_id: str, path: str | Path) -> Path:
    """Write ``plan`` with the identity of the model it was made for."""
    path = Path(path)
    path.write_text(json.dumps({**plan.to_dict(), "model": model_id}, indent=2, sort_keys=True))
    return path


def load_plan(path: str | Path, model_id: str | None = None) -> Plan:
    """Read a plan file; with ``model_id``, refuse one made for another model, or one that does
    not say which model it was made for (a hand-written plan names it with a ``"model"`` field:
    the error gives the value)."""
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PlanError(f"--plan {str(path)!r}: not JSON ({err})") from None
    except OSError as err:  # missing, a folder, unreadable
        raise PlanError(f"--plan {str(path)!r}: cannot read it ({err.strerror})") from None
    if not isinstance(data, dict):
        raise PlanError(f"--plan {str(path)!r}: not a plan (a JSON {type(data).__name__})")
    plan = plan_from_dict(data, f"--plan {str(path)!r}")
    made_for = data.get("model")
    if model_id and not made_for:
        raise PlanError(
            f"--plan {str(path)!r} does not say which model it was made for; if it was made "
            f'for this one, add "model": "{model_id}" to it'
        )
    if model_id and made_for != model_id:
        raise PlanError(
            f"--plan {str(path)!r} was made for model {made_for!r}, not {model_id!r}; "
            "plan this model first (tvm-hetero plan MODEL -o plan.json)"
        )
    return plan
