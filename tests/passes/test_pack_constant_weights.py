"""PackConstantWeights: constant matmul weights of CPU kernels stored as register-tile panels."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_hetero._compat import PrimFunc, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.passes import PackConstantWeights
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu.common import largest_divisor, vector_lanes

CPU = make_target(cpu_device().target)
W = np.random.default_rng(0).standard_normal((16, 32)).astype("float32")


def _module(weight_is_constant=True, target=CPU, rows=8):
    """``x @ W`` legalized, its kernel tagged with ``target``."""
    x = relax.Var("x", relax.TensorType((rows, 16), "float32"))
    params = [x]
    if weight_is_constant:
        w = relax.const(W)
    else:
        w = relax.Var("w", relax.TensorType((16, 32), "float32"))
        params.append(w)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    return tvm.IRModule(
        {
            gv: f.with_attr("target", target) if isinstance(f, PrimFunc) else f
            for gv, f in mod.functions_items()
        }
    )


def _kernels(mod):
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, PrimFunc)}


@pytest.mark.parametrize("rows", [8, 1])  # 1: a batch-1 dense layer (dlight finds no I axis)
def test_weight_and_kernel_become_panels_and_numbers_stay(rows):
    nr = largest_divisor(32, 2 * vector_lanes(CPU, 32))
    before = _module(rows=rows)
    text = before.script()
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    assert before.script() == text  # the input is not mutated
    ((name, kernel),) = _kernels(after).items()
    assert name == "matmul_panels"
    shape = f"(T.int64({32 // nr}), T.int64(16), T.int64({nr}))"
    assert f"B: T.Buffer({shape}, " in kernel.script()
    call = after["main"].body.blocks[0].bindings[0].value
    packed = call.args[1].fields[1].value.numpy()
    np.testing.assert_array_equal(packed, W.reshape(16, 32 // nr, nr).transpose(1, 0, 2))
    # the rule reads the panels in place (no per-call pack) and computes the same numbers
    scheduled = schedule_kernels(after, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    assert (
        "_reindex = T.sblock_alloc_buffer" not in next(iter(_kernels(scheduled).values())).script()
    )
    x = np.random.default_rng(1).standard_normal((rows, 16)).astype("float32")
    got = relax.VirtualMachine(tvm.compile(scheduled, CPU), tvm.cpu())["main"](
        tvm.runtime.tensor(x)
    )
    np.testing.assert_allclose(got.numpy(), x @ W, rtol=1e-5, atol=1e-5)


def test_weights_that_are_not_constants_or_not_on_a_cpu_stay():
    for mod in (_module(weight_is_constant=False), _module(target=make_target("cuda"))):
        tvm.ir.assert_structural_equal(PackConstantWeights()(mod), mod)


def test_kernels_called_by_units_are_packed_too():
    """A deployment's kernels are called by its units, not by ``main``: ``x @ W`` moved into a
    function ``unit0`` that ``main`` calls gets its weight in panels all the same."""
    mod = _module()
    bb = relax.BlockBuilder(mod)
    unit_gv = bb.add_func(mod["main"].without_attr("global_symbol"), "unit0")
    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.Call(unit_gv, [x]))
        bb.emit_func_output(out)
    outer = bb.get()
    with tvm.transform.PassContext(instruments=[]):  # a hand-made two-function module
        after = PackConstantWeights()(outer)
    assert "matmul_panels" in _kernels(after)
    packed = (
        after[unit_gv.name_hint].body.blocks[0].bindings[0].value.args[1].fields[1].value.numpy()
    )
    assert packed.shape[1] == 16 and packed.ndim == 3
