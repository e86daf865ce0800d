"""FlexPie: each layer cut into spatial tiles over a cluster's devices, priced by XGBoost."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tvm_hetero.strategies.base import Strategy

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
    module = "tvm_hetero.strategies.flexpie.report"

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


STRATEGY = FlexPie()
