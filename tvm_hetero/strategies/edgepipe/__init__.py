"""EdgePipe: runs of layers as pipeline stages over a cluster's devices and links."""

from __future__ import annotations

from tvm_hetero.strategies.base import Strategy


class EdgePipe(Strategy):
    """EdgePipe (``--strategy edgepipe``): layers, their measured costs per kind of device, the
    cluster's links and memories, and the DP over stages that minimises the pipeline's period
    (a stream of requests; ``run --microbatches``)."""

    name = "edgepipe"
    help = "EdgePipe: runs of layers as pipeline stages over a cluster's devices and links"
    plan_kind = "pipeline"
    module = "tvm_hetero.strategies.edgepipe.report"
    objective = "throughput"


STRATEGY = EdgePipe()
