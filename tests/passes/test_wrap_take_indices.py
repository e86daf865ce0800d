import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.passes import WrapTakeIndices


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
    tvm.ir.assert_structural_equal(WrapTakeIndices()(Before), Expected)
    tvm.ir.assert_structural_equal(Before, before)  # the input is not mutated


def test_no_fast_take_leaves_the_module_as_it_is():
    tvm.ir.assert_structural_equal(WrapTakeIndices()(Expected), Expected)
    tvm.ir.assert_structural_equal(WrapTakeIndices()(WrapTakeIndices()(Before)), Expected)
