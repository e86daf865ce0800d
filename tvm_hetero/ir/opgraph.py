"""OpGraph: a read-only operator graph of one Relax function.

One node per operator call (high-level Relax ops before legalization, ``call_tir`` kernels after),
one edge per tensor passed from a producer to a consumer, with shapes, FLOPs and bytes. Tuples,
``TupleGetItem`` and variable aliases are transparent: an edge joins the operator that made a
tensor to the operator that reads it. Node ids are the stable binding ids of
:mod:`tvm_hetero.ir.bindings`, so a plan made on this graph can be applied by a pass.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import tvm
from tvm import relax

from tvm_hetero._compat import TupleType, estimate_tir_flops
from tvm_hetero.ir.attrs import CALL_TIR_OP, ENTRY_FUNC
from tvm_hetero.ir.bindings import OpBinding, iter_bindings, op_bindings
from tvm_hetero.ir.op_costs import op_flops
from tvm_hetero.ir.recurrent import RECURRENT_ATTR, RecurrentLoop
from tvm_hetero.ir.types import TensorInfo, attrs_to_dict, tensor_infos

INPUT_PREFIX = "input:"
CONST = "const"


@dataclass(frozen=True)
class OpNode:
    """One operator call.

    ``flops``, ``bytes_read`` and ``bytes_written`` are ``None`` when a shape is symbolic.
    ``param_bytes`` counts the constant (weight) inputs; ``kind`` is ``relax`` for a high-level op,
    ``call_tir`` for a kernel and ``call`` for a call to another Relax function.
    """

    node_id: str
    op: str
    kind: str
    attrs: dict[str, Any]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    flops: int | None
    bytes_read: int | None
    bytes_written: int | None
    param_bytes: int

    @property
    def dynamic(self) -> bool:
        """``True`` when some input or output shape is symbolic."""
        return not all(t.static for t in (*self.inputs, *self.outputs))


@dataclass(frozen=True)
class GraphInput:
    """A parameter of the function; ``is_param`` marks weights (beyond ``num_input``)."""

    name: str
    tensor: TensorInfo | None
    is_param: bool
    consumers: tuple[str, ...]


@dataclass(frozen=True)
class _Leaf:
    """One tensor flowing through the function: who made it, which output, its type."""

    producer: str
    port: int
    info: TensorInfo

    @property
    def name(self) -> str:
        return f"{self.producer}:{self.port}"


@dataclass
class OpGraph:
    """Operator graph of a Relax function as a ``networkx.MultiDiGraph``.

    Attributes
    ----------
    graph : networkx.MultiDiGraph
        Nodes are op ids with attribute ``op`` (an :class:`OpNode`); edges are keyed by tensor
        name (``producer:port``) with attributes ``bytes`` and ``tensor``.
    inputs : list[GraphInput]
        Function parameters in order.
    outputs : list[str]
        Ids of the nodes whose tensors the function returns (``input:NAME`` for a pass-through).
    bindings : dict[str, OpBinding]
        Node id -> the Relax binding it came from.
    """

    func_name: str
    graph: nx.MultiDiGraph
    inputs: list[GraphInput]
    outputs: list[str]
    bindings: dict[str, OpBinding] = field(repr=False)

    @classmethod
    def from_module(cls, mod: tvm.IRModule, func_name: str = ENTRY_FUNC) -> OpGraph:
        """Build the graph of ``mod[func_name]``.

        Raises
        ------
        KeyError
            If the module has no function of that name.
        """
        names = [gv.name_hint for gv in mod.get_global_vars()]
        if func_name not in names:
            raise KeyError(f"OpGraph: module has no function {func_name!r}; it has {sorted(names)}")
        func = mod[func_name]
        if not isinstance(func, relax.Function):
            raise TypeError(
                f"OpGraph: {func_name!r} is a {type(func).__name__}, not a Relax function"
            )
        return _Builder(mod, func, func_name).build()

    @property
    def nodes(self) -> list[OpNode]:
        """Operator nodes in topological (program) order."""
        return [self.graph.nodes[n]["op"] for n in self.topo_order()]

    def node(self, node_id: str) -> OpNode:
        """The node with id ``node_id``."""
        return self.graph.nodes[node_id]["op"]

    def topo_order(self) -> list[str]:
        """A stable topological order: program order, which respects every edge."""
        return list(self.bindings)

    def activation_ops(self) -> tuple[list[str], set[str], list[str]]:
        """Split the operators, in order, for planners that cut the model into pieces: those on
        the path from the inputs to the outputs; those computed from weights alone (transposes
        of weights: the build folds them, so they go with their first reader); and those no
        output depends on (a torch export's unused max-pool indices: they go with their
        producer, since as sinks of their own they would hide every cut after them)."""
        order = self.topo_order()
        reads_input = {c for i in self.inputs if not i.is_param for c in i.consumers}
        from_weights: set[str] = set()
        for n in order:
            if n not in reads_input and set(self.graph.predecessors(n)) <= from_weights:
                from_weights.add(n)
        outputs = [o for o in self.outputs if not o.startswith(INPUT_PREFIX)]
        live = set(outputs).union(*(nx.ancestors(self.graph, o) for o in outputs))
        work = [n for n in order if n in live and n not in from_weights]
        dead = [n for n in order if n not in live and n not in from_weights]
        return work, from_weights, dead

    def total_flops(self) -> int | None:
        """Sum of FLOPs over all nodes (``None`` if any is symbolic)."""
        flops = [n.flops for n in self.nodes]
        return None if any(f is None for f in flops) else sum(flops)  # type: ignore[misc]

    def census(self) -> list[dict[str, Any]]:
        """Per op type: count, FLOPs, bytes moved, parameter bytes and share of total FLOPs."""
        rows: dict[str, dict[str, Any]] = {}
        for n in self.nodes:
            row = rows.setdefault(
                n.op, {"op": n.op, "count": 0, "flops": 0, "bytes": 0, "param_bytes": 0}
            )
            row["count"] += 1
            row["param_bytes"] += n.param_bytes
            for key, value in (("flops", n.flops), ("bytes", _moved(n))):
                row[key] = None if value is None or row[key] is None else row[key] + value
        total = sum(r["flops"] or 0 for r in rows.values()) or 1
        for r in rows.values():
            r["flops_share"] = (r["flops"] or 0) / total
        return sorted(rows.values(), key=lambda r: (-(r["flops"] or 0), r["op"]))

    def op_counts(self) -> Counter[str]:
        """Number of nodes per op name."""
        return Counter(n.op for n in self.nodes)


def _moved(node: OpNode) -> int | None:
    if node.bytes_read is None or node.bytes_written is None:
        return None
    return node.bytes_read + node.bytes_written


class _Builder:
    """Walks the bindings once, tracking which leaf tensors each variable holds."""

    def __init__(self, mod: tvm.IRModule, func: relax.Function, func_name: str) -> None:
        self.mod, self.func, self.func_name = mod, func, func_name
        self.leaves: dict[relax.Var, list[_Leaf]] = {}
        self.graph = nx.MultiDiGraph()
        self.consumers: dict[str, list[str]] = {}

    def build(self) -> OpGraph:
        num_input = self.func.attrs.get("num_input") if self.func.attrs else None
        n_inputs = len(self.func.params) if num_input is None else int(num_input)
        for p in self.func.params:
            infos = tensor_infos(p.ty)
            self.leaves[p] = [_Leaf(INPUT_PREFIX + str(p.name), i, t) for i, t in enumerate(infos)]
        by_var = {b.var: b for b in op_bindings(self.func)}
        for _, _, binding in iter_bindings(self.func):
            if binding.var in by_var:
                self._add_op(by_var[binding.var])
            elif isinstance(binding, relax.VarBinding):
                self.leaves[binding.var] = self._leaves_of(binding.value)
        inputs = [
            GraphInput(
                str(p.name),
                (tensor_infos(p.ty) or [None])[0],
                i >= n_inputs,
                tuple(self.consumers.get(INPUT_PREFIX + str(p.name), [])),
            )
            for i, p in enumerate(self.func.params)
        ]
        outputs = list(
            dict.fromkeys(leaf.producer for leaf in self._leaves_of(self.func.body.body))
        )
        bindings = {b.node_id: b for b in by_var.values()}
        return OpGraph(self.func_name, self.graph, inputs, outputs, bindings)

    def _add_op(self, ob: OpBinding) -> None:
        call = ob.call
        op, kind, args = _describe(call)
        in_leaves = [leaf for a in args for leaf in self._leaves_of(a)]
        outputs = tuple(tensor_infos(ob.var.ty))
        self.leaves[ob.var] = [_Leaf(ob.node_id, i, t) for i, t in enumerate(outputs)]
        ins = tuple(leaf.info for leaf in in_leaves)
        static = all(t.static for t in (*ins, *outputs))
        attrs = attrs_to_dict(call.attrs)
        node = OpNode(
            node_id=ob.node_id,
            op=op,
            kind=kind,
            attrs=attrs,
            inputs=ins,
            outputs=outputs,
            flops=self._flops(call, op, kind, attrs, ins, outputs) if static else None,
            bytes_read=sum(t.nbytes for t in ins) if static else None,  # type: ignore[misc]
            bytes_written=sum(t.nbytes for t in outputs) if static else None,  # type: ignore[misc]
            param_bytes=sum(leaf.info.nbytes or 0 for leaf in in_leaves if leaf.producer == CONST),
        )
        self.graph.add_node(ob.node_id, op=node)
        for leaf in in_leaves:
            if leaf.producer == CONST:
                continue
            self.consumers.setdefault(leaf.producer, []).append(ob.node_id)
            if leaf.producer.startswith(INPUT_PREFIX):
                continue
            if not self.graph.has_edge(leaf.producer, ob.node_id, key=leaf.name):
                self.graph.add_edge(
                    leaf.producer,
                    ob.node_id,
                    key=leaf.name,
                    bytes=leaf.info.nbytes,
                    tensor=leaf.info,
                )

    def _leaves_of(self, expr: relax.Expr) -> list[_Leaf]:
        if isinstance(expr, relax.Var):
            return self.leaves.get(expr, [])
        if isinstance(expr, tvm.ir.expr.Constant):
            return [_Leaf(CONST, i, t) for i, t in enumerate(tensor_infos(expr.ty))]
        if isinstance(expr, relax.Tuple):
            return [leaf for f in expr.fields for leaf in self._leaves_of(f)]
        if isinstance(expr, relax.TupleGetItem):
            return _tuple_item(self._leaves_of(expr.tuple_value), expr.tuple_value.ty, expr.index)
        return []

    def _flops(self, call: relax.Call, op: str, kind: str, attrs: dict, ins, outs) -> int:
        if kind == "call_tir":
            prim = self.mod[call.args[0]]
            if RECURRENT_ATTR in prim.attrs:  # TVM's estimate reads no Let
                return RecurrentLoop.from_key(prim.attrs[RECURRENT_ATTR]).flops
            return int(estimate_tir_flops(tvm.IRModule({"main": prim})))
        if kind != "relax":
            return 0
        return op_flops(op, [t.shape for t in ins], outs[0].shape if outs else None, attrs)


def _describe(call: relax.Call) -> tuple[str, str, list[relax.Expr]]:
    """(op name, kind, tensor arguments) of a call."""
    if isinstance(call.op, tvm.ir.Op):
        name = str(call.op.name)
        if name == CALL_TIR_OP:
            return str(call.args[0].name_hint), "call_tir", list(call.args[1:2])
        return name, "relax", list(call.args)
    if isinstance(call.op, tvm.ir.GlobalVar):
        return str(call.op.name_hint), "call", list(call.args)
    return str(call.op), "call", list(call.args)


def _tuple_item(leaves: list[_Leaf], ty: Any, index: int) -> list[_Leaf]:
    if not isinstance(ty, TupleType):
        return leaves
    sizes = [len(tensor_infos(f)) for f in ty.fields]
    start = sum(sizes[:index])
    return leaves[start : start + sizes[index]]
