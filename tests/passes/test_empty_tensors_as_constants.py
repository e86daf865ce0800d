"""EmptyTensorsAsConstants: an operator whose result has no elements computes nothing."""

import numpy as np
import tvm
from conftest import op_calls
from tvm import relax
from tvm.ir.expr import Constant
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.passes import EmptyTensorsAsConstants


@I.ir_module
class Before:
    """Swin3D's mask arithmetic in small: a slice with no rows scattered back into the data."""

    @R.function
    def main(x: R.Tensor((8, 4), "float32"), ids: R.Tensor((0, 1), "int64")) -> R.Tensor(
        (8, 4), "float32"
    ):
        with R.dataflow():
            none = R.strided_slice(x, axes=[0], begin=[8], end=[8])
            doubled = R.multiply(none, none)
            y = R.scatter_nd(x, ids, doubled)
            z = R.add(y, x)
            R.output(z)
        return z


def test_empty_results_are_constants_and_a_scatter_of_nothing_is_its_data():
    after = EmptyTensorsAsConstants()(Before)
    names = [c.op.name for c in op_calls(after)]
    assert names == ["relax.add"]  # the slice, its product and the scatter are gone
    bindings = {b.var.name: b.value for b in after["main"].body.blocks[0].bindings}
    assert isinstance(bindings["none"], Constant)
    assert bindings["none"].value.numpy().shape == (0, 4)
    assert isinstance(bindings["doubled"], Constant)
    assert bindings["y"].same_as(after["main"].params[0])  # the scatter is its data
    tvm.ir.assert_structural_equal(Before, Before)  # not mutated


def test_the_model_builds_and_computes_what_it_did():
    """TVM's own legalization of the scatter divided by the empty dimension (the build
    aborted); without it the result is ``2 x``."""
    after = relax.transform.LegalizeOps()(EmptyTensorsAsConstants()(Before))
    vm = relax.VirtualMachine(tvm.compile(after), tvm.cpu())
    x = np.arange(32, dtype="float32").reshape(8, 4)
    got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.zeros((0, 1), "int64")))
    np.testing.assert_array_equal(got.numpy(), 2 * x)


def test_a_module_without_empty_tensors_is_left():
    @I.ir_module
    class Full:
        @R.function
        def main(x: R.Tensor((8, 4), "float32")) -> R.Tensor((8, 4), "float32"):
            with R.dataflow():
                y = R.add(x, x)
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(EmptyTensorsAsConstants()(Full), Full)
