"""Per-operator profiles of the kernels the build runs: the unfused build takes the fused build's
rewrites, and each kernel a rewrite emits is filed under the operator it rewrites."""

import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.ir.attrs import ENTRY_FUNC
from tvm_hetero.ir.bindings import iter_bindings
from tvm_hetero.ir.mutate import with_marked_bindings
from tvm_hetero.profiling.model_run import op_times_workload, per_op_times
from tvm_hetero.runtime.instrument import KernelTimer

RNG = np.random.default_rng(0)
TABLE = RNG.standard_normal((3, 8, 4)).astype("float32")
TAPS = RNG.standard_normal((16, 4, 3)).astype("float32")


def test_marked_bindings_rename_each_operator_and_keep_the_rest():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
            with R.dataflow():
                a = R.add(x, x)
                t = (a, x)
                b = R.multiply(t[0], a)
                R.output(b)
            return b

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((2, 3), "float32")) -> R.Tensor((2, 3), "float32"):
            with R.dataflow():
                _op0 = R.add(x, x)
                t = (_op0, x)
                _op1 = R.multiply(t[0], _op0)
                R.output(_op1)
            return _op1

    marked, names = with_marked_bindings(Before, "main")
    tvm.ir.assert_structural_equal(marked, Expected)
    names_now = [str(b.var.name) for _, _, b in iter_bindings(marked["main"])]
    assert names_now == ["_op0", "t", "lv2", "_op1"]  # the parser bound t[0]: no operator
    assert names == {"_op0": "a", "_op1": "b"}
    assert isinstance(next(iter_bindings(marked["main"]))[2].var, relax.DataflowVar)


def _model():
    """A 1-D convolution (``Conv1dAsMatmul``: a columns kernel and a product) and products of
    weights gathered by id (``GatheredWeightsInPlace``: the gather read inside the product)."""
    ids = relax.Var("ids", relax.TensorType([5, 1], "int64"))
    x = relax.Var("x", relax.TensorType([5, 4, 1], "float32"))
    s = relax.Var("s", relax.TensorType([1, 4, 64], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [ids, x, s]):
        with bb.dataflow():
            gathered = bb.emit(relax.op.gather_nd(relax.const(TABLE), ids), "gathered")
            products = bb.emit(relax.op.matmul(gathered, x), "products")
            conv = bb.emit(relax.op.nn.conv1d(s, relax.const(TAPS), padding=[1, 1]), "conv")
            out = bb.emit_output(relax.Tuple([bb.emit(relax.op.nn.relu(products), "relu"), conv]))
        bb.emit_func_output(out)
    mod = bb.get()
    mod["main"] = mod["main"].with_attr("num_input", 3)
    return load_model(mod, name="attribution")


INPUTS = (
    np.array([[2], [0], [1], [1], [2]], "int64"),
    RNG.standard_normal((5, 4, 1)).astype("float32"),
    RNG.standard_normal((1, 4, 64)).astype("float32"),
)


def test_a_rewrites_kernels_are_the_operators_it_rewrites():
    model = _model()
    device = cpu_device(threads=1)
    work = op_times_workload(api.place(model, [device], api.Placement((device.name,))))
    nodes = {}
    for symbol, calls in work.by_symbol.items():
        for node in calls:
            nodes.setdefault(node, []).append(symbol)
    assert "gathered" not in nodes  # read in place by the product's kernel
    assert any("gathered_matvec" in s for s in nodes["products"])
    assert len(nodes["conv"]) == 2  # its columns and their product
    assert set(nodes) == {"products", "relu", "conv"}


def test_operators_times_are_their_kernels_summed_and_the_outputs_the_fused_builds():
    model = _model()
    device = cpu_device(threads=1)
    placed = api.place(model, [device], api.Placement((device.name,)))
    times = per_op_times(placed, INPUTS, runs=1)
    assert set(times.node_seconds) == {"products", "relu", "conv"}
    assert 0 < times.total_s <= times.wall_s
    vm = relax.VirtualMachine(op_times_workload(placed).executable, tvm.cpu())
    unfused = vm[ENTRY_FUNC](*[tvm.runtime.tensor(a) for a in INPUTS])
    fused = api.compile(model, [device])
    vm = relax.VirtualMachine(fused.deployment.libraries[0], tvm.cpu())
    whole = vm[ENTRY_FUNC](*[tvm.runtime.tensor(a) for a in INPUTS])
    for a, b in zip(unfused, whole, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)
    products = np.einsum("tpq,tqc->tpc", TABLE[INPUTS[0][:, 0]], INPUTS[1])
    np.testing.assert_allclose(unfused[0].numpy(), np.maximum(products, 0), rtol=1e-5, atol=1e-5)


def test_a_run_files_one_sample_an_operator_its_kernels_summed():
    timer = KernelTimer({"columns": ["conv"], "product": ["conv"], "copy": [None, "x"]})
    for symbol in ("columns", "product", "copy", "copy"):
        timer(None, symbol, True, None)
        timer(None, symbol, False, None)
    timer.finish_run()
    assert len(timer.samples["conv"]) == 1 and timer.samples["conv"][0] > 0
    assert set(timer.samples) == {"conv", "x"}  # the first copy was no operator's


def test_weights_copied_to_a_kernel_off_the_home_device_are_no_operators():
    from tvm_hetero.build.vdevices import vdevices_of
    from tvm_hetero.pipelines import get_pipeline
    from tvm_hetero.profiling.model_run import COPY_SYMBOL

    model = _model()
    devices = [cpu_device(threads=1), cpu_device(1, threads=1)]
    placed = get_pipeline(
        "manual_placement", vdevices=vdevices_of(devices), assignment={"conv": 1}
    )(model.mod)
    work = op_times_workload(placed)
    copies = work.by_symbol[COPY_SYMBOL]  # in call order: the weight's copy is a call too
    placed_copies = [c for c in copies if c is not None]
    assert len(placed_copies) == 2 == len(work.copies)  # the signal in, the result home
    assert set(placed_copies) == set(work.copies) and None in copies
    assert len([n for ns in work.by_symbol.values() for n in ns if n == "conv"]) == 2


def test_operators_keep_their_ids_behind_copies_named_like_them():
    """The frontend names operators ``lv``, ``lv1``...; so does the block builder the copies
    ``PlaceOperators`` makes, and one ahead of an operator shifted its id (``lv1`` read as
    ``lv1.1``), so the planners read another operator's time, or none."""
    from tvm_hetero.build.vdevices import vdevices_of
    from tvm_hetero.ir.bindings import op_bindings
    from tvm_hetero.pipelines import get_pipeline

    x = relax.Var("x", relax.TensorType([4, 8], "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.matmul(x, relax.const(TABLE[0])))  # lv
            b = bb.emit(relax.op.nn.relu(a))  # lv1
            out = bb.emit_output(relax.op.add(b, a))
        bb.emit_func_output(out)
    model = load_model(bb.get(), name="named-alike")
    ids = [o.node_id for o in op_bindings(model.mod["main"])]
    devices = [cpu_device(threads=1), cpu_device(1, threads=1)]
    placed = get_pipeline(
        "manual_placement", vdevices=vdevices_of(devices), assignment={o: 1 for o in ids}
    )(model.mod)
    assert [o.node_id for o in op_bindings(placed["main"])][:2] == ["lv", "lv1"]  # copies
    work = op_times_workload(placed)
    timed = {n for ns in work.by_symbol.values() for n in ns} - {None}  # weights' copies
    assert set(ids) <= timed and timed - set(ids) == set(work.copies)
    assert all(c.startswith("copy:") for c in work.copies)
