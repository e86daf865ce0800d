"""FlexPie: each layer cut into spatial tiles over a cluster's devices, priced by XGBoost."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tvm_hetero.strategies.base import PlanResult, Progress, Strategy

if TYPE_CHECKING:
    from tvm_hetero.devices.cluster import ClusterSpec
    from tvm_hetero.devices.spec import DeviceSpec
    from tvm_hetero.frontends.model import Model

SPATIAL_OPS = ("conv", "pool")
"""Operators FlexPie's schemes cut into tiles (by name); a model without any has nothing to
tile."""


class FlexPie(Strategy):
    """FlexPie (``--strategy flexpie``): layers cut into spatial tiles (rows, columns, grid,
    channels), costs from trained XGBoost estimators, a reverse DP over fused segments,
    confirmed end to end."""

    name = "flexpie"
    help = "FlexPie: each layer cut into spatial tiles over a cluster's devices (XGBoost costs)"
    plan_kind = "spatial"

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        from tvm_hetero.strategies.flags import number

        group.add_argument(
            "--estimators", metavar="DIR", help="trained estimators (tvm-hetero train -o DIR); "
            "default: the ones shipped, trained on the emulated cluster",
        )  # fmt: skip
        group.add_argument(
            "--max-run", type=number(int, 1), default=6,
            help="layers one segment may fuse (NT then T; default 6, as FlexPie's code)",
        )  # fmt: skip
        group.add_argument(
            "--confirm-plans", type=number(int, 1), default=3, metavar="N",
            help="with --confirm: FlexPie's plan and the cheapest others timed end to end, N "
            "in all, besides the home device alone (default 3)",
        )  # fmt: skip

    def applicable(
        self, model: Model, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None
    ) -> str | None:  # fmt: skip
        from tvm_hetero.ir.opgraph import OpGraph

        found = super().applicable(model, devices, cluster)
        ops = {n.op for n in OpGraph.from_module(model.mod).nodes}
        if found is None and not any(s in op for op in ops for s in SPATIAL_OPS):
            return "no spatial layers (convolution or pooling) to cut into tiles"
        return found

    def plan(
        self, model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace,
        progress: Progress,
    ) -> PlanResult:  # fmt: skip
        from tvm_hetero.strategies.flexpie.report import plan_result

        return plan_result(model, devices, settings, progress)

    def report(self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
        from tvm_hetero.strategies.flexpie.report import tables

        return tables(result)

    def describe(self, plan: Any, model: Model) -> Any:
        from tvm_hetero.strategies.flexpie.report import plan_table

        return plan_table(plan)

    def plot(
        self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec], path: str | Path
    ) -> Path | None:  # fmt: skip
        from tvm_hetero.strategies.flexpie.report import times
        from tvm_hetero.viz.spatial_schemes import plot_spatial_schemes

        found = result.detail
        title = f"{model.name}: FlexPie on {len(devices)} devices"
        return plot_spatial_schemes(result.plan, len(found.geometry), title, path, times(found))


STRATEGY = FlexPie()
