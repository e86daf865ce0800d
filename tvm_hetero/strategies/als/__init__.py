"""Lee et al.: one device per operator, from the fewest whole-model profiling runs (ALS DP)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tvm_hetero.strategies.base import Strategy

if TYPE_CHECKING:
    from tvm_hetero.devices.cluster import ClusterSpec
    from tvm_hetero.devices.spec import DeviceSpec
    from tvm_hetero.frontends.model import Model


class Als(Strategy):
    """Lee et al. (``--strategy als``): the device-mapped graph, its profiling runs, the ALS DP
    (or the exact MILP), guarded by the best priority baseline and confirmed end to end."""

    name = "als"
    help = "Lee et al.: one device per operator (ALS DP)"
    plan_kind = "placement"
    module = "tvm_hetero.strategies.als.report"
    offline = True

    def applicable(
        self, model: Model, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None
    ) -> str | None:  # fmt: skip
        from tvm_hetero.devices.discover import local_class

        if any(d.host is not None for d in devices):
            return "its profiling runs put every device in one VM; a cluster's are apart"
        found = super().applicable(model, devices, cluster)
        if found is None and len({local_class(d) for d in devices}) == 1:
            return ("its devices compute alike, and one operator at a time no plan over "
                    "them beats one of them")  # fmt: skip
        return found

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        from tvm_hetero.strategies.flags import number

        group.add_argument("--exact", action="store_true", help="exact MILP instead of the ALS DP")
        group.add_argument(
            "--min-gain", type=number(float, 0.0, 1.0, high_open=True), default=0.05,
            help="keep the best priority baseline unless the optimum is predicted this much "
            "faster (default 0.05; 0 disables the guard)",
        )  # fmt: skip
        group.add_argument("--pim", metavar="DEV", help="DEV runs only PIM operators (Lee et al.)")


STRATEGY = Als()
