"""GatheredWeightsInPlace: a batch of matrix-vector products whose matrices are gathered from
constant weights by an id an item reads each item's matrix in place."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_hetero import api
from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import GatheredWeightsInPlace
from tvm_hetero.passes import gathered_weights_in_place as pass_module

CPU = {"kind": "llvm", "mcpu": "haswell"}
CUDA = {"kind": "cuda", "arch": "sm_80"}
WEIGHTS = np.random.default_rng(0).standard_normal((3, 4, 2)).astype("float32")


def _experts(row: bool, device=CPU, columns: int = 1, deeper_ids: bool = False, weights=None,
             items: int = 5):  # fmt: skip
    """``matmul(gather_nd(W, ids), x)`` (``x`` of ``[items, 2, columns]``) or, with ``row``,
    ``matmul(x, gather_nd(W, ids))`` (``x`` of ``[items, columns, 4]``), ``W`` of ``[3, 4, 2]``
    (a parameter where ``weights`` is ``"input"``), five ids (``items`` 1: ``x`` broadcast)."""
    vdev = VDevice(make_target(device), 0, "global")
    ids = relax.Var("ids", relax.TensorType([5, 1], "int64", vdev))
    shape = [items, columns, 4] if row else [items, 2, columns]
    x = relax.Var("x", relax.TensorType(shape, "float32", vdev))
    params = [ids, x]
    table = relax.const(WEIGHTS)
    if weights == "input":
        table = relax.Var("w", relax.TensorType([3, 4, 2], "float32", vdev))
        params.append(table)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            if deeper_ids:  # ids of [5, 1, 1]: a gather of another form
                ids_ = bb.emit(relax.op.reshape(ids, [5, 1, 1]))
                gathered = bb.emit(relax.op.gather_nd(table, ids_, batch_dims=0))
                gathered = bb.emit(relax.op.reshape(gathered, [5, 4, 2]))
            else:
                gathered = bb.emit(relax.op.gather_nd(table, ids))
            y = relax.op.matmul(x, gathered) if row else relax.op.matmul(gathered, x)
            out = bb.emit_output(relax.op.nn.relu(bb.emit(y)))
        bb.emit_func_output(out)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def _outputs(mod: tvm.IRModule, ids: np.ndarray, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(relax.transform.LegalizeOps()(mod)), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(ids), tvm.runtime.tensor(x)).numpy()


def test_a_column_times_gathered_matrices_reads_each_items_matrix_in_place():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(CPU, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def gathered_matvec(
            w: T.Buffer((T.int64(3), T.int64(4), T.int64(2)), "float32"),
            ids: T.Buffer((T.int64(5), T.int64(1)), "int64"),
            v: T.Buffer((T.int64(5), T.int64(2)), "float32"),
            out: T.Buffer((T.int64(5), T.int64(4)), "float32"),
        ):
            T.func_attr({"op_pattern": 4, "tirx.noalias": True})
            for t, p, q in T.grid(T.int64(5), T.int64(4), T.int64(2)):
                with T.sblock("gathered_matvec"):
                    v_t, v_p, v_q = T.axis.remap("SSR", [t, p, q])
                    T.reads(w[T.floormod(ids[v_t, T.int64(0)], T.int64(3)), v_p, v_q],
                            ids[v_t, T.int64(0)], v[v_t, v_q])  # fmt: skip
                    T.writes(out[v_t, v_p])
                    with T.init():
                        out[v_t, v_p] = T.float32(0.0)
                    out[v_t, v_p] = (
                        out[v_t, v_p]
                        + w[T.floormod(ids[v_t, T.int64(0)], T.int64(3)), v_p, v_q] * v[v_t, v_q]
                    )

        @R.function
        def main(
            ids: R.Tensor((5, 1), "int64", "llvm:0"), x: R.Tensor((5, 2, 1), "float32", "llvm:0")
        ) -> R.Tensor((5, 4, 1), "float32", "llvm:0"):
            cls = Expected
            with R.dataflow():
                _gathered = R.gather_nd(R.const(WEIGHTS), ids, batch_dims=0)  # DCE drops it
                v = R.squeeze(x, axis=[2])
                rows = R.call_tir(
                    cls.gathered_matvec, (R.const(WEIGHTS), ids, v),
                    out_ty=R.Tensor((5, 4), "float32", "llvm:0"),
                )  # fmt: skip
                y: R.Tensor((5, 4, 1), "float32", "llvm:0") = R.reshape(rows, R.shape([5, 4, 1]))
                out = R.nn.relu(y)
                R.output(out)
            return out

    before = _experts(row=False)
    text = before.script()
    after = GatheredWeightsInPlace()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after, Expected)


def test_a_row_times_gathered_matrices_reads_them_transposed_at_compile_time():
    after = GatheredWeightsInPlace()(_experts(row=True))
    (kernel,) = [f for gv, f in after.functions_items() if gv.name_hint == "gathered_matvec"]
    weights = kernel.params[0].ty.shape
    assert [int(d) for d in weights] == [3, 2, 4]  # [E, Q, P]: each row of W[e]^T its depth
    assert "R.squeeze(x, axis=[1])" in after["main"].script()


@pytest.mark.parametrize("row", [False, True])
def test_numbers_match_the_gather_then_the_products_for_every_id(row):
    mod = _experts(row)
    rng = np.random.default_rng(1)
    x = rng.standard_normal([5, 1, 4] if row else [5, 2, 1]).astype("float32")
    ids = np.array([[0], [2], [1], [2], [0]], dtype="int64")
    after = GatheredWeightsInPlace()(mod)
    np.testing.assert_allclose(_outputs(after, ids, x), _outputs(mod, ids, x), rtol=1e-5, atol=1e-6)
    # ids past the table wrap (WrapIndices wraps the gather's too): no read outside it
    wrapped = _outputs(after, ids + np.array([[3], [-3], [6], [-1], [3]]), x)
    expected = _outputs(mod, np.array([[0], [2], [1], [1], [0]], dtype="int64"), x)
    np.testing.assert_allclose(wrapped, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "case",
    [dict(device=CUDA), dict(columns=3), dict(row=True, columns=2), dict(weights="input"),
     dict(deeper_ids=True), dict(items=1), dict(row=True, items=1)],
)  # fmt: skip
def test_other_products_stay(case):
    mod = _experts(**{"row": False, **case})
    tvm.ir.assert_structural_equal(GatheredWeightsInPlace()(mod), mod)


def test_switched_off_nothing_changes(monkeypatch):
    monkeypatch.setattr(pass_module, "IN_PLACE", False)
    mod = _experts(row=False)
    tvm.ir.assert_structural_equal(GatheredWeightsInPlace()(mod), mod)


def test_an_exported_batch_of_experts_compiles_to_one_kernel_and_matches_onnx_runtime(tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    weights = rng.standard_normal((4, 64, 48)).astype("float32")
    nodes = [
        helper.make_node("GatherND", ["w", "ids"], ["chosen"]),
        helper.make_node("MatMul", ["x", "chosen"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "experts",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [16, 1]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 1, 48])],
        [numpy_helper.from_array(weights, "w")],
    )  # fmt: skip
    path = tmp_path / "experts.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    feeds = {"ids": rng.integers(0, 4, (16, 1)).astype("int64"),
             "x": rng.standard_normal((16, 1, 64)).astype("float32")}  # fmt: skip
    compiled = api.compile(load_model(path), [cpu_device()])
    choices = {k.kernel: k.rule for k in api.kernel_schedules(compiled)}
    assert [rule for kernel, rule in choices.items() if "gathered_matvec" in kernel] == [
        "dot_products"
    ], choices
    assert not [kernel for kernel in choices if "gather_nd" in kernel], choices
    (got,) = api.run(compiled, feeds)
    (want,) = ort.InferenceSession(str(path)).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
