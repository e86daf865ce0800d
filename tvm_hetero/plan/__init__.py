"""Plans: pure data and pure algorithms deciding where each piece of work runs."""

from tvm_hetero.plan.placement import (
    Placement,
    PlanError,
    normalize_op_type,
    place_by_op_type,
    summarize,
)

__all__ = ["Placement", "PlanError", "normalize_op_type", "place_by_op_type", "summarize"]
