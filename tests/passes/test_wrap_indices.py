import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.passes import WrapIndices


@I.ir_module
class Before:
    @R.function
    def main(table: R.Tensor((10, 4), "float32"), ids: R.Tensor((3,), "int64")):
        with R.dataflow():
            rows = R.take(table, ids, axis=0)
            cols = R.take(table, R.const([1], "int64"), axis=1, mode="clip")
            R.output(rows, cols)
        return (rows, cols)


@I.ir_module
class Expected:
    @R.function
    def main(table: R.Tensor((10, 4), "float32"), ids: R.Tensor((3,), "int64")):
        with R.dataflow():
            rows = R.take(table, ids, axis=0, mode="wrap")
            cols = R.take(table, R.const([1], "int64"), axis=1, mode="clip")
            R.output(rows, cols)
        return (rows, cols)


def test_fast_takes_wrap_and_other_modes_stay():
    before = Before.clone()
    tvm.ir.assert_structural_equal(WrapIndices()(Before), Expected)
    tvm.ir.assert_structural_equal(Before, before)  # the input is not mutated


def test_no_fast_take_leaves_the_module_as_it_is():
    tvm.ir.assert_structural_equal(WrapIndices()(Expected), Expected)
    tvm.ir.assert_structural_equal(WrapIndices()(WrapIndices()(Before)), Expected)


@I.ir_module
class Gathers:
    @R.function
    def main(x: R.Tensor((4, 5), "float32"), ids: R.Tensor((4, 2), "int64"),
             tuples: R.Tensor((3, 2), "int64")):  # fmt: skip
        with R.dataflow():
            along = R.gather_elements(x, ids, axis=1)
            picked = R.gather_nd(x, tuples)
            R.output(along, picked)
        return (along, picked)


@I.ir_module
class GathersWrapped:
    @R.function
    def main(x: R.Tensor((4, 5), "float32"), ids: R.Tensor((4, 2), "int64"),
             tuples: R.Tensor((3, 2), "int64")):  # fmt: skip
        with R.dataflow():
            along = R.gather_elements(x, R.floor_mod(ids, R.const(5, "int64")), axis=1)
            picked = R.gather_nd(x, R.floor_mod(tuples, R.const([4, 5], "int64")))
            R.output(along, picked)
        return (along, picked)


def test_gathers_take_their_ids_modulo_each_dimension():
    tvm.ir.assert_structural_equal(WrapIndices()(Gathers), GathersWrapped)


def test_gather_ids_past_the_table_wrap_instead_of_reading_other_memory():
    import numpy as np
    from tvm import relax

    from tvm_hetero.build.multi_device import build

    mod = Gathers.clone()
    mod.update_global_info("vdevice", [I.vdevice("llvm", 0)])
    vm = relax.VirtualMachine(build(mod), [tvm.cpu()])
    x = np.arange(20, dtype="float32").reshape(4, 5)
    ids = np.array([[0, -1], [4, 10**12], [-5, 3], [7, 2]], dtype="int64")
    tuples = np.array([[0, 0], [3, 4], [-1, 10**9]], dtype="int64")
    along, picked = vm["main"](*[tvm.runtime.tensor(a) for a in (x, ids, tuples)])
    np.testing.assert_array_equal(along.numpy(), np.take_along_axis(x, ids % 5, axis=1))
    wrapped = tuples % np.array([4, 5])
    np.testing.assert_array_equal(picked.numpy(), x[wrapped[:, 0], wrapped[:, 1]])
