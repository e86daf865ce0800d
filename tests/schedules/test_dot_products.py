"""Rows of dot products against a vector (a batched matrix-vector product, each batch its own
matrix): the rule's schedule and the default build's numbers; what it leaves to other rules."""

import numpy as np
import pytest
import tvm
from conftest import fused_kernels, kernel_script
from tvm import relax

from tvm_hetero._compat import make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.schedules import kernel_choices, schedule_kernels

CPU = make_target({**cpu_device().target, "num-cores": 2})


def _module(a_shape, x_shape) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType(a_shape, "float32"))
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    with bb.function("main", [a, x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(a, x))
        bb.emit_func_output(out)
    return fused_kernels(bb.get(), CPU)


def _run(mod: tvm.IRModule, *arrays: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, CPU), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


@pytest.mark.parametrize(
    ("a_shape", "x_shape"),
    [((8, 64, 128), (8, 128, 1)), ((3, 5, 96), (3, 96, 1)), ((64, 256), (256, 1))],
)
def test_rows_of_dot_products_sum_vectors_of_the_depth_and_match(a_shape, x_shape):
    mod = _module(a_shape, x_shape)
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:dot_products"}
    text = kernel_script(scheduled)
    assert "rf_local" in text and "T.vectorized(" in text, text
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype("float32")
    x = rng.standard_normal(x_shape).astype("float32")
    np.testing.assert_allclose(_run(scheduled, a, x), _run(mod, a, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("a_shape", "x_shape"),
    [
        ((8, 64, 100), (8, 100, 1)),  # a depth no vector divides
        ((8, 64, 128), (8, 128, 4)),  # four columns: a matmul
        ((8, 1, 128), (8, 128, 1)),  # no rows
    ],
)
def test_other_shapes_are_left_to_the_other_rules(a_shape, x_shape):
    scheduled = schedule_kernels(_module(a_shape, x_shape), "rules")
    assert "rule:dot_products" not in {c.label for c in kernel_choices(scheduled)}
