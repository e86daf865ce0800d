"""``tvm-hetero inspect MODEL``: operator census."""

from __future__ import annotations

import argparse

from tvm_hetero.cli.common import console, model_from_args, table
from tvm_hetero.ir.opgraph import OpGraph


def census_table(graph: OpGraph, title: str):
    """The census as a rich table."""
    rows = [
        [
            r["op"], r["count"],
            None if r["flops"] is None else r["flops"] / 1e9,
            None if r["bytes"] is None else r["bytes"] / 2**20,
            r["param_bytes"] / 2**20,
            100 * r["flops_share"],
        ]
        for r in graph.census()
    ]  # fmt: skip
    return table(title, ["op", "count", "GFLOPs", "MiB moved", "param MiB", "FLOPs %"], rows)


def summary_line(graph: OpGraph) -> str:
    """One line: nodes, edges, inputs, FLOPs, weights."""
    flops = graph.total_flops()
    params = sum(n.param_bytes for n in graph.nodes) / 2**20
    gflops = "symbolic" if flops is None else f"{flops / 1e9:.3f}"
    inputs = ", ".join(
        f"{i.name}{list(i.tensor.shape) if i.tensor else ''}"
        for i in graph.inputs
        if not i.is_param
    )
    return (
        f"{graph.graph.number_of_nodes()} operators, {graph.graph.number_of_edges()} tensors, "
        f"{gflops} GFLOPs, {params:.1f} MiB of weights; inputs: {inputs}"
    )


def run(args: argparse.Namespace) -> int:
    """Print the census (and optionally every node, and a chart)."""
    model = model_from_args(args, static=False)
    graph = OpGraph.from_module(model.mod)
    console().print(census_table(graph, f"Operator census of {model.name}"))
    console().print(summary_line(graph))
    if args.nodes:
        rows = [
            [n.node_id, n.op, " ".join(str(list(t.shape or [])) for t in n.outputs), n.flops]
            for n in graph.nodes
        ]
        console().print(
            table("Operators in topological order", ["id", "op", "output", "FLOPs"], rows)
        )
    if args.plot:
        from tvm_hetero.viz.census import plot_census

        path = plot_census(graph.census(), f"{model.name}: operator census", args.plot)
        console().print(f"wrote {path}")
    return 0
