"""DUET's phased schedule (paper Sec. IV-A, Fig. 7): a DAG cut into sequential and multi-path
phases.

Pure graph code on node ids: no IR, no measurement.

A phase runs after every earlier phase. A sequential phase is one chain of work; a multi-path
phase is several branches with no edge between them (between a fork and its join), each one coarse
subgraph the compiler fuses as a whole. The cut points are the nodes every source-to-sink path
goes through (the dominators of the sink); between two consecutive ones, the nodes fall into
weakly connected pieces: one piece is sequential work (it may have a skip edge inside, like a
residual block), several pieces are branches. A branch with forks of its own stays one subgraph:
the paper partitions one level deep (its footnote 1), for granularity and fewer copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

_SOURCE = ("phases", "source")
_SINK = ("phases", "sink")


@dataclass(frozen=True)
class Phase:
    """One phase: a single branch (sequential) or several independent ones (multi-path).

    Attributes
    ----------
    branches : tuple[tuple[str, ...], ...]
        Node ids of each branch, in the given topological order; branches ordered by their first
        node.
    """

    branches: tuple[tuple[str, ...], ...]

    @property
    def parallel(self) -> bool:
        """``True`` for a multi-path phase."""
        return len(self.branches) > 1

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node of the phase."""
        return tuple(n for b in self.branches for n in b)


def phases(dag: nx.DiGraph, order: Sequence[str] | None = None) -> list[Phase]:
    """Cut ``dag`` into phases that cover every node once and respect every edge.

    Parameters
    ----------
    dag : networkx.DiGraph
        Nodes are ids; an edge ``u -> v`` means ``v`` reads what ``u`` makes.
    order : sequence of str, optional
        A topological order of the nodes (program order); default: lexicographic topological.

    Raises
    ------
    ValueError
        If ``dag`` has a cycle or ``order`` is not a topological order of its nodes.
    """
    if not nx.is_directed_acyclic_graph(dag):
        raise ValueError("phases: the graph has a cycle")
    order = list(order) if order is not None else list(nx.lexicographical_topological_sort(dag))
    position = {n: i for i, n in enumerate(order)}
    if set(position) != set(dag.nodes) or any(position[u] >= position[v] for u, v in dag.edges):
        raise ValueError("phases: order is not a topological order of the graph's nodes")
    if not order:
        return []
    g = nx.DiGraph(dag)
    g.add_edges_from((_SOURCE, n) for n in dag.nodes if dag.in_degree(n) == 0)
    g.add_edges_from((n, _SINK) for n in dag.nodes if dag.out_degree(n) == 0)
    idom = nx.immediate_dominators(g, _SOURCE)
    cuts = [_SINK]
    while cuts[-1] != _SOURCE:
        cuts.append(idom[cuts[-1]])
    cuts.reverse()
    on_cut = set(cuts)
    region: dict = {}

    def region_of(n) -> object:
        walk = []
        while n not in on_cut and n not in region:
            walk.append(n)
            n = idom[n]
        start = n if n in on_cut else region[n]
        for w in walk:
            region[w] = start
        return start

    members: dict = {c: [] for c in cuts}
    for n in order:
        if n not in on_cut:
            members[region_of(n)].append(n)
    pieces: list[list[list[str]]] = []
    for cut in cuts[:-1]:
        if cut != _SOURCE:
            pieces.append([[cut]])
        if members[cut]:
            parts = nx.weakly_connected_components(dag.subgraph(members[cut]))
            branches = [sorted(p, key=position.__getitem__) for p in parts]
            pieces.append(sorted(branches, key=lambda b: position[b[0]]))
    return _merge_sequential(pieces, position)


def _merge_sequential(pieces: list[list[list[str]]], position: dict) -> list[Phase]:
    """Consecutive single-branch pieces become one sequential phase."""
    out: list[Phase] = []
    run: list[str] = []
    for branches in pieces:
        if len(branches) == 1:
            run.extend(branches[0])
            continue
        if run:
            out.append(Phase((tuple(sorted(run, key=position.__getitem__)),)))
            run = []
        out.append(Phase(tuple(tuple(b) for b in branches)))
    if run:
        out.append(Phase((tuple(sorted(run, key=position.__getitem__)),)))
    return out
