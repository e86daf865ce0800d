"""Lee et al.: one device per operator, from the fewest whole-model profiling runs (ALS DP)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tvm_hetero.strategies.base import PlanResult, Progress, Strategy

if TYPE_CHECKING:
    from tvm_hetero.devices.spec import DeviceSpec
    from tvm_hetero.frontends.model import Model


class Als(Strategy):
    """Lee et al. (``--strategy als``): the device-mapped graph, its profiling runs, the ALS DP
    (or the exact MILP), guarded by the best priority baseline and confirmed end to end."""

    name = "als"
    help = "Lee et al.: one device per operator (ALS DP)"
    plan_kind = "placement"
    offline = True

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        from tvm_hetero.strategies.flags import number

        group.add_argument("--exact", action="store_true", help="exact MILP instead of the ALS DP")
        group.add_argument(
            "--min-gain", type=number(float, 0.0, 1.0, high_open=True), default=0.05,
            help="keep the best priority baseline unless the optimum is predicted this much "
            "faster (default 0.05; 0 disables the guard)",
        )  # fmt: skip
        group.add_argument("--pim", metavar="DEV", help="DEV runs only PIM operators (Lee et al.)")

    def plan(
        self, model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace,
        progress: Progress,
    ) -> PlanResult:  # fmt: skip
        from tvm_hetero.strategies.als.report import plan_result

        return plan_result(model, devices, settings, progress)

    def report(self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
        from tvm_hetero.strategies.als.report import tables

        return tables(result, devices)

    def plot(
        self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec], path: str | Path
    ) -> Path | None:  # fmt: skip
        from tvm_hetero.strategies.als.report import plot

        return plot(result, model, path)


STRATEGY = Als()
