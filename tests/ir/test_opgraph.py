import math

import networkx as nx
import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.ir.bindings import iter_bindings, op_bindings
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.zoo import ZOO, load_zoo_model


@I.ir_module
class SplitMatmul:
    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32")):
        with R.dataflow():
            parts = R.split(x, 2, axis=0)
            a = parts[0]
            b = parts[1]
            ya = R.matmul(a, w)
            yb = R.matmul(b, w)
            same = R.add(ya, ya)
            out = R.concat([same, yb], axis=0)
            R.output(out)
        return out


def test_split_matmul_graph_structure():
    g = OpGraph.from_module(SplitMatmul)
    assert g.topo_order() == ["parts", "ya", "yb", "same", "out"]
    # split feeds each matmul one tensor; `add(ya, ya)` reads one tensor once; concat reads two.
    edges = sorted((u, v, k) for u, v, k in g.graph.edges(keys=True))
    assert edges == [
        ("parts", "ya", "parts:0"),
        ("parts", "yb", "parts:1"),
        ("same", "out", "same:0"),
        ("ya", "same", "ya:0"),
        ("yb", "out", "yb:0"),
    ]
    assert g.graph.edges["parts", "ya", "parts:0"]["bytes"] == 4 * 16 * 4
    assert [i.name for i in g.inputs] == ["x", "w"]
    assert g.inputs[1].consumers == ("ya", "yb")
    assert g.outputs == ["out"]
    ya = g.node("ya")
    assert ya.flops == 2 * 4 * 16 * 32
    assert ya.bytes_read == (4 * 16 + 16 * 32) * 4
    assert ya.bytes_written == 4 * 32 * 4
    assert g.node("parts").outputs[1].shape == (4, 16)
    assert g.bindings["ya"].call.op.name == "relax.matmul"


def _independent_edge_count(func: relax.Function) -> int:
    """Tensor uses between op bindings, resolved through tuples and aliases without OpGraph."""
    producers = {}  # var -> list of tensor ids it holds
    ops = {b.var for b in op_bindings(func)}
    count = 0

    def leaves(expr):
        if isinstance(expr, relax.Var):
            return producers.get(expr, [])
        if isinstance(expr, relax.Tuple):
            return [x for f in expr.fields for x in leaves(f)]
        if isinstance(expr, relax.TupleGetItem):
            items = leaves(expr.tuple_value)
            ty = expr.tuple_value.ty
            if isinstance(ty, relax.TupleType):
                sizes = [len(f.fields) if isinstance(f, relax.TupleType) else 1 for f in ty.fields]
                start = sum(sizes[: expr.index])
                return items[start : start + sizes[expr.index]]
            return items
        return []

    for _, _, binding in iter_bindings(func):
        value = binding.value
        if binding.var in ops:
            args = value.args[1:2] if value.op.name == "relax.call_tir" else value.args
            used = {t for a in args for t in leaves(a)}
            count += len(used)
            ty = binding.var.ty
            n = len(ty.fields) if isinstance(ty, relax.TupleType) else 1
            producers[binding.var] = [(binding.var, i) for i in range(n)]
        else:
            producers[binding.var] = leaves(value)
    return count


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_graphs_match_relax_function(name):
    model = load_zoo_model(f"{name}:tiny")
    func = model.mod["main"]
    g = OpGraph.from_module(model.mod)
    n_calls = sum(isinstance(b.value, relax.Call) for _, _, b in iter_bindings(func))
    assert g.graph.number_of_nodes() == n_calls
    assert g.graph.number_of_edges() == _independent_edge_count(func)
    order = {n: i for i, n in enumerate(g.topo_order())}
    assert all(order[u] < order[v] for u, v in g.graph.edges())
    assert nx.is_directed_acyclic_graph(g.graph)
    for node in g.nodes:
        if node.op == "relax.matmul":
            a, b = node.inputs[0].shape, node.inputs[1].shape
            batch = math.prod(np.broadcast_shapes(a[:-2], b[:-2]))  # (s, b, k) @ (k, n) too
            assert node.flops == 2 * batch * a[-2] * a[-1] * b[-1]
        if node.op == "relax.nn.conv2d":
            out, w = node.outputs[0].shape, node.inputs[1].shape
            assert node.flops == 2 * math.prod(out) * w[1] * w[2] * w[3]
        for _, _, data in g.graph.in_edges(node.node_id, data=True):
            assert data["bytes"] == data["tensor"].nbytes > 0


def test_conv2d_flops_analytic():
    g = OpGraph.from_module(load_zoo_model("resnet18:tiny").mod)
    stem = next(n for n in g.nodes if n.op == "relax.nn.conv2d")
    # 3 -> 8 channels, 7x7 kernel, stride 2 on 32x32: output 1x8x16x16
    assert stem.outputs[0].shape == (1, 8, 16, 16)
    assert stem.flops == 2 * (8 * 16 * 16) * (3 * 7 * 7)
    assert stem.param_bytes == 8 * 3 * 7 * 7 * 4


def test_depthwise_conv_flops_counts_groups():
    g = OpGraph.from_module(load_zoo_model("mobilenet:tiny").mod)
    dw = next(n for n in g.nodes if n.op == "relax.nn.conv2d" and n.attrs["groups"] > 1)
    c = dw.attrs["groups"]
    oh, ow = dw.outputs[0].shape[2:]
    assert dw.flops == 2 * c * oh * ow * 9


def test_call_tir_graph_after_legalization():
    mod = relax.transform.LegalizeOps()(load_zoo_model("mlp:tiny").mod)
    g = OpGraph.from_module(mod)
    assert {n.kind for n in g.nodes} == {"call_tir"}
    matmuls = [n for n in g.nodes if n.op.startswith("matmul")]
    assert [n.flops for n in matmuls] == [2 * 4 * 16 * 32, 2 * 4 * 32 * 8]
    assert g.graph.number_of_edges() == _independent_edge_count(mod["main"])


@I.ir_module
class Dynamic:
    @R.function
    def main(x: R.Tensor(("n", 16), "float32"), w: R.Tensor((16, 4), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


def test_dynamic_shapes_are_symbolic_not_a_crash():
    g = OpGraph.from_module(Dynamic)
    y = g.node("y")
    assert y.outputs[0].shape == ("n", 4)
    assert y.dynamic and y.flops is None and y.bytes_read is None
    assert g.total_flops() is None
    assert g.graph.edges["y", "z", "y:0"]["bytes"] is None
    assert g.census()[0]["flops"] is None


def test_missing_function_is_a_clear_error():
    with pytest.raises(KeyError, match="no function 'forward'"):
        OpGraph.from_module(SplitMatmul, "forward")


def test_duplicate_var_names_get_unique_ids():
    ty = relax.TensorType((2, 2), "float32")
    x = relax.Var("x", ty)
    t0, t1 = relax.Var("t", ty), relax.Var("t", ty)  # Relax allows repeated name hints
    block = relax.BindingBlock(
        [relax.VarBinding(t0, relax.op.add(x, x)), relax.VarBinding(t1, relax.op.multiply(t0, t0))]
    )
    func = relax.Function([x], relax.SeqExpr([block], t1), ty)
    g = OpGraph.from_module(tvm.IRModule({"main": func}))
    assert g.topo_order() == ["t", "t.1"]
    assert list(g.graph.edges()) == [("t", "t.1")]


def test_census_shares_sum_to_one():
    g = OpGraph.from_module(load_zoo_model("bert-small:tiny").mod)
    rows = g.census()
    assert abs(sum(r["flops_share"] for r in rows) - 1) < 1e-9
    assert rows[0]["op"] == "relax.matmul"
    assert sum(r["count"] for r in rows) == g.graph.number_of_nodes()
