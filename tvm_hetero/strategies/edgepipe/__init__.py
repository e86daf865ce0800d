"""EdgePipe: runs of layers as pipeline stages over a cluster's devices and links."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tvm_hetero.strategies.base import PlanResult, Progress, Strategy

if TYPE_CHECKING:
    from tvm_hetero.devices.spec import DeviceSpec
    from tvm_hetero.frontends.model import Model


class EdgePipe(Strategy):
    """EdgePipe (``--strategy edgepipe``): layers, their measured costs per kind of device, the
    cluster's links and memories, and the DP over stages that minimises the pipeline's period
    (a stream of requests; ``run --microbatches``)."""

    name = "edgepipe"
    help = "EdgePipe: runs of layers as pipeline stages over a cluster's devices and links"
    plan_kind = "pipeline"
    objective = "throughput"

    def plan(
        self, model: Model, devices: Sequence[DeviceSpec], settings: argparse.Namespace,
        progress: Progress,
    ) -> PlanResult:  # fmt: skip
        from tvm_hetero.strategies.edgepipe.report import plan_result

        return plan_result(model, devices, settings, progress)

    def report(self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec]) -> list:
        from tvm_hetero.strategies.edgepipe.report import baseline_table, stage_table

        return [stage_table(result.detail), baseline_table(result.detail)]

    def plot(
        self, result: PlanResult, model: Model, devices: Sequence[DeviceSpec], path: str | Path
    ) -> Path | None:  # fmt: skip
        from tvm_hetero.viz.pipeline_stages import plot_pipeline_stages

        title = f"{model.name}: EdgePipe on {len(devices)} devices"
        return plot_pipeline_stages(result.plan, result.detail.layers.labels, title, path)


STRATEGY = EdgePipe()
