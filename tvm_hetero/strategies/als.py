"""Lee et al. on tvm-hetero's graph view: the DCG of a model and the profiling runs it needs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tvm_hetero.ir.opgraph import INPUT_PREFIX, OpGraph
from tvm_hetero.plan.dcg import DCG, END, START, CGEdge, build_dcg

PIM_OPS = frozenset(
    {"relax.matmul", "relax.add", "relax.subtract", "relax.multiply", "relax.divide"}
)
"""What the paper's PIM device runs: matrix products and element-wise arithmetic."""


def dcg_of(
    graph: OpGraph,
    devices: Sequence[str],
    capability: Mapping[str, frozenset[str] | None] | None = None,
) -> DCG:
    """The DCG of an operator graph: one edge per tensor use, graph inputs from the start node and
    graph outputs to the end node (both on the home device, ``devices[0]``)."""
    ops = [(n.node_id, n.op) for n in graph.nodes]
    edges = []
    for u, v, data in graph.graph.edges(data=True):
        t = data["tensor"]
        edges.append(CGEdge(u, v, t.dtype, t.numel or 0))
    for inp in graph.inputs:
        if inp.is_param or inp.tensor is None:
            continue
        for consumer in dict.fromkeys(inp.consumers):
            edges.append(CGEdge(START, consumer, inp.tensor.dtype, inp.tensor.numel or 0))
    for out in graph.outputs:
        if out.startswith(INPUT_PREFIX):
            continue
        for t in graph.node(out).outputs:
            edges.append(CGEdge(out, END, t.dtype, t.numel or 0))
    return build_dcg(ops, edges, devices, capability)
