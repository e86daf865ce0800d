"""DUET: a model's branches as subgraphs run on devices at once, corrected by measured runs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tvm_hetero.strategies.base import Strategy

if TYPE_CHECKING:
    from tvm_hetero.devices.cluster import ClusterSpec
    from tvm_hetero.devices.spec import DeviceSpec
    from tvm_hetero.frontends.model import Model


class Duet(Strategy):
    """DUET (``--strategy duet``): phases and their branches as subgraphs, compiler-aware costs,
    a greedy start corrected by end-to-end runs, and the best single device as fallback."""

    name = "duet"
    help = "DUET: branches as subgraphs on devices at once, corrected by measured runs"
    plan_kind = "subgraphs"
    module = "tvm_hetero.strategies.duet.report"
    offline = True

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        from tvm_hetero.strategies.flags import number

        group.add_argument(
            "--correction-runs", type=number(int, 1), default=12, metavar="N",
            help="end-to-end runs the correction may measure (default 12)",
        )  # fmt: skip
        group.add_argument(
            "--trial-runs", type=number(int, 1), default=30, metavar="N",
            help="timed runs of each plan the correction measures (default 30)",
        )  # fmt: skip

    def applicable(
        self, model: Model, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None
    ) -> str | None:  # fmt: skip
        from tvm_hetero.ir.opgraph import OpGraph
        from tvm_hetero.strategies.duet.planner import duet_graph

        found = super().applicable(model, devices, cluster)
        if found is None and len(set(duet_graph(OpGraph.from_module(model.mod)).branch)) < 2:
            return "no branches: every phase is one chain, nothing runs at once"
        return found


STRATEGY = Duet()
