"""EOP: key operators cut between two devices, each share tuned from fitted patterns."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tvm_hetero.strategies.base import Strategy

if TYPE_CHECKING:
    from tvm_hetero.devices.cluster import ClusterSpec
    from tvm_hetero.devices.spec import DeviceSpec
    from tvm_hetero.frontends.model import Model


class Eop(Strategy):
    """EOP (``--strategy eop``): the key operators' time patterns swept and fitted on two
    devices, each cut along its best dimension at the share that balances them."""

    name = "eop"
    help = "EOP: key operators cut between two devices"
    plan_kind = "split"
    module = "tvm_hetero.strategies.eop.report"
    offline = True

    def add_arguments(self, group: argparse._ArgumentGroup) -> None:
        from tvm_hetero.strategies.flags import fraction, number

        group.add_argument(
            "--key-share", type=fraction, default=0.95,
            help="key operators: the fewest that take this share of the time (default 0.95)",
        )  # fmt: skip
        group.add_argument(
            "--samples", type=number(int, 3), default=6, help="sizes swept per dimension (>= 3)"
        )
        group.add_argument("--span", type=fraction, default=0.01, help="ratio step of the search")

    def applicable(
        self, model: Model, devices: Sequence[DeviceSpec], cluster: ClusterSpec | None
    ) -> str | None:  # fmt: skip
        if len(devices) != 2:
            return f"cuts operators between exactly two devices ({len(devices)} given)"
        if any(d.host is not None for d in devices):
            return "its per-operator runs are timed in this process, not on a cluster's workers"
        return super().applicable(model, devices, cluster)


STRATEGY = Eop()
