"""The device-mapped computational graph (DCG) of Lee et al. (Kim et al., TODAES 2023).

Every operator is copied once per device able to run it; a tensor edge between two copies on
different devices needs a transfer. Transfers are classified into distinct-attribute (DA) edges by
(source device, destination device, dtype, element count): edges with equal attributes cost the
same and are profiled once. A start and an end node live on the home device (device 0), where the
inputs arrive and the outputs are returned. Pure data: no IR, no measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

START = "<start>"
END = "<end>"


@dataclass(frozen=True)
class DAKey:
    """Attributes that determine a transfer's cost."""

    src: int
    dst: int
    dtype: str
    elements: int


@dataclass(frozen=True)
class CGEdge:
    """A tensor from ``src`` to ``dst`` (``START`` / ``END`` for graph inputs and outputs)."""

    src: str
    dst: str
    dtype: str
    elements: int


@dataclass(frozen=True)
class DCG:
    """Device-mapped graph.

    Attributes
    ----------
    ops : tuple[str, ...]
        Operator ids in topological order.
    devices : tuple[str, ...]
        Device names; device 0 is home and must run every operator.
    capable : Mapping[str, tuple[int, ...]]
        Operator id -> devices able to run it.
    edges : tuple[CGEdge, ...]
        Tensor edges of the operator graph, including ``START`` -> op and op -> ``END``.
    """

    ops: tuple[str, ...]
    devices: tuple[str, ...]
    capable: Mapping[str, tuple[int, ...]]
    edges: tuple[CGEdge, ...]

    def device_of(self, node: str, assignment: Mapping[str, int]) -> int:
        """Device of ``node`` under ``assignment`` (start and end are home)."""
        return 0 if node in (START, END) else assignment[node]

    def da_key(self, edge: CGEdge, src_dev: int, dst_dev: int) -> DAKey | None:
        """The DA key of ``edge`` between two devices (``None`` within one device)."""
        return None if src_dev == dst_dev else DAKey(src_dev, dst_dev, edge.dtype, edge.elements)

    def da_edges(self) -> set[DAKey]:
        """Every DA key some assignment can produce."""
        keys = set()
        for e in self.edges:
            for a in self.placements(e.src):
                for b in self.placements(e.dst):
                    key = self.da_key(e, a, b)
                    if key is not None:
                        keys.add(key)
        return keys

    def covered(self, assignment: Mapping[str, int]) -> set[DAKey]:
        """DA keys a full assignment exercises (each transfer it performs)."""
        out = set()
        for e in self.edges:
            key = self.da_key(
                e, self.device_of(e.src, assignment), self.device_of(e.dst, assignment)
            )
            if key is not None:
                out.add(key)
        return out

    def placements(self, node: str) -> tuple[int, ...]:
        """Devices ``node`` can sit on (start and end: home only)."""
        return (0,) if node in (START, END) else tuple(self.capable[node])

    def sizes(self) -> dict[str, int]:
        """Sizes as the paper reports them: CG and DCG nodes and edges, DA edges."""
        dcg_nodes = sum(len(self.capable[o]) for o in self.ops) + 2
        dcg_edges = sum(
            len(self.placements(e.src)) * len(self.placements(e.dst)) for e in self.edges
        )
        return {
            "cg_nodes": len(self.ops), "cg_edges": len(self.edges), "dcg_nodes": dcg_nodes,
            "dcg_edges": dcg_edges, "da_edges": len(self.da_edges()),
        }  # fmt: skip


def build_dcg(
    ops: Sequence[tuple[str, str]],
    edges: Sequence[CGEdge],
    devices: Sequence[str],
    capability: Mapping[str, frozenset[str] | None] | None = None,
) -> DCG:
    """Build the DCG of an operator graph.

    Parameters
    ----------
    ops : Sequence[tuple[str, str]]
        ``(node_id, op_type)`` in topological order.
    edges : Sequence[CGEdge]
        Tensor edges (with ``START`` / ``END`` for inputs and outputs).
    devices : Sequence[str]
        Device names; the first is home.
    capability : Mapping[str, frozenset[str] | None], optional
        Device name -> op types it runs (``None``: all). Default: every device runs everything.
        The home device must run everything.
    """
    capability = dict(capability or {})
    if capability.get(devices[0]) is not None:
        raise ValueError(f"build_dcg: the home device {devices[0]!r} must run every operator")
    unknown = sorted(set(capability) - set(devices))
    if unknown:
        raise ValueError(f"build_dcg: capability given for unknown device(s) {unknown}")
    capable = {
        node: tuple(
            i for i, d in enumerate(devices) if capability.get(d) is None or op in capability[d]
        )
        for node, op in ops
    }
    return DCG(tuple(n for n, _ in ops), tuple(devices), capable, tuple(edges))
