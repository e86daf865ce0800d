"""An ONNX graph with what it computes from constants alone evaluated before import.

Exporters write a model's shape arithmetic as nodes: the ``Shape`` of a tensor, then
``Gather``, ``Concat``, ``Sub``... down to the pads of a ``Pad``, the target of an ``Expand``
or the mask of an attention. With the inputs' shapes known every such value is a constant,
but TVM 0.27's ONNX frontend folds only some of them, and converters that need a constant
(``Pad``'s pads: "Dynamic pads are not supported yet") fail on the rest (Longformer's sliding
windows). :func:`folded` evaluates, in graph order, each node whose inputs are all known: an
initializer, a ``Constant``, an output evaluated before, or the ``Shape`` of a tensor whose
shape ONNX's shape inference knows; with ONNX's reference evaluator (``onnx.reference``), one
node at a time. An evaluated value larger than :data:`MOST_ELEMENTS` is not kept (the node
stays, a weight's worth of constants is the frontend's to handle), nor is any node of a
random operator, with a subgraph, or of another domain. What the graph still needs of the
evaluated values becomes initializers.

The loader tries a model as it is first and folds it only where the frontend failed
(:func:`~tvm_hetero.frontends.load.load_model`): models that import today import the same.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

MOST_ELEMENTS = 1 << 20
"""The most elements an evaluated value may have to be kept (a 1024 x 1024 mask)."""

RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
          "Multinomial", "Bernoulli", "Dropout"}  # fmt: skip
"""Operators whose outputs are not a function of their inputs (``Dropout``: its mask)."""


def folded(proto: onnx.ModelProto, shapes: Mapping | None = None) -> onnx.ModelProto | None:
    """``proto`` with every node computable from constants evaluated (see the module), its
    inputs of ``shapes`` (by name: a symbolic batch given a size) of those shapes; None where
    nothing could be (or shape inference fails on it).

    Folded in passes to a fixed point (at most :data:`MOST_PASSES`): a pass's values give
    ONNX's shape inference shapes it could not propagate before (a pad computed through
    ``Ceil``, which it does not evaluate, padding a tensor whose ``Shape`` the next pad's
    arithmetic reads), and the next pass folds what they make constant. EnCodec's encoder pads
    each of its 18 convolutions by such arithmetic on the last one's output: 29 passes."""
    if shapes:
        proto = _with_input_shapes(proto, shapes)
    result = None
    for _ in range(MOST_PASSES):
        once = _folded_once(proto)
        if once is None:
            break
        proto = result = once
    return result


MOST_PASSES = 64
"""The most passes :func:`folded` makes over a graph."""


def _folded_once(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """One pass of :func:`folded`: ``proto`` with the nodes computable from constants and the
    shapes its shape inference knows now evaluated; None where there are none."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # shape inference refuses some exports outright
        return None
    graph = inferred.graph
    static = _static_shapes(graph)
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    opsets = list(proto.opset_import)
    kept, changed = [], False
    for node in graph.node:
        values = _evaluate(node, known, static, opsets)
        if values is None:
            kept.append(node)
            continue
        known.update(values)
        changed = True
    if not changed:
        return None
    return _rebuilt(proto, kept, known)


def _with_input_shapes(proto: onnx.ModelProto, shapes: Mapping) -> onnx.ModelProto:
    """A copy of ``proto`` whose inputs named in ``shapes`` have those shapes."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for value in copy.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name], strict=True):
                dim.Clear()
                dim.dim_value = int(size)
    return copy


def _static_shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    shapes = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor = info.type.tensor_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            shapes[info.name] = [d.dim_value for d in tensor.shape.dim]
    return shapes


def _evaluate(
    node: onnx.NodeProto, known: dict, shapes: dict, opsets: list
) -> dict[str, np.ndarray] | None:  # fmt: skip
    """The node's outputs by name where it can be evaluated here, else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type in RANDOM:
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for a in node.attribute):  # fmt: skip
        return None
    if node.op_type == "Shape" and node.input[0] not in known and node.input[0] in shapes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        dims = shapes[node.input[0]]
        return {node.output[0]: np.array(dims[attrs.get("start", 0) : attrs.get("end")], "int64")}
    if not all(name == "" or name in known for name in node.input):
        return None
    from onnx.reference import ReferenceEvaluator

    inputs = [name for name in node.input if name]
    graph = onnx.helper.make_graph(
        [node], "one", [], [onnx.helper.make_value_info(o, onnx.TypeProto()) for o in node.output
                            if o],
        [numpy_helper.from_array(np.asarray(known[n]), n) for n in dict.fromkeys(inputs)],
    )  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    try:
        results = ReferenceEvaluator(model).run(None, {})
    except Exception:  # an operator the reference does not know, or inputs it refuses
        return None
    outputs = [o for o in node.output if o]
    values = {o: np.asarray(v) for o, v in zip(outputs, results, strict=True)}
    if any(v.size > MOST_ELEMENTS or v.dtype == object for v in values.values()):
        return None
    return values


def _rebuilt(proto: onnx.ModelProto, kept: list, known: dict) -> onnx.ModelProto:
    """``proto`` with the nodes ``kept``, and as initializers what they and the graph's outputs
    read of ``known``."""
    graph = proto.graph
    read = {name for node in kept for name in node.input if name}
    inputs = {i.name for i in graph.input}
    nodes = list(kept)
    for out in graph.output:
        if out.name in known and out.name not in inputs:
            constant = f"{out.name}__folded"
            read.add(constant)
            known[constant] = known[out.name]
            nodes.append(onnx.helper.make_node("Identity", [constant], [out.name]))
    initializers = [numpy_helper.from_array(np.asarray(known[n]), n)
                    for n in sorted(read) if n in known and n not in inputs]  # fmt: skip
    new_graph = onnx.helper.make_graph(
        nodes, graph.name, list(graph.input), list(graph.output), initializers,
        value_info=[v for v in graph.value_info if v.name not in known],
    )  # fmt: skip
    model = onnx.helper.make_model(new_graph, opset_imports=list(proto.opset_import),
                                   ir_version=proto.ir_version)  # fmt: skip
    model.functions.extend(proto.functions)
    return model
