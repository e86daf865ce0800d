import numpy as np
import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.passes import PlaceOperators
from tvm_hetero.plan import Placement
from tvm_hetero.zoo import load_zoo_model


@I.ir_module
class Before:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 16), "float32"), w: R.Tensor((16, 8), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


def test_middle_operator_moves_with_copies_in_and_out():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((4, 16), "float32", "llvm:0"), w: R.Tensor((16, 8), "float32", "llvm:0")
        ) -> R.Tensor((4, 8), "float32", "llvm:0"):
            with R.dataflow():
                x1 = R.to_vdevice(x, "llvm:1")
                w1 = R.to_vdevice(w, "llvm:1")
                y = R.matmul(x1, w1)
                y0 = R.to_vdevice(y, "llvm:0")
                z = R.nn.relu(y0)
                R.output(z)
            return z

    before = Before.clone()
    after = PlaceOperators({"y": 1})(Before)
    tvm.ir.assert_structural_equal(after, Expected)
    tvm.ir.assert_structural_equal(Before, before)  # the input is not mutated


def test_result_on_other_device_is_copied_home():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((4, 16), "float32", "llvm:0"), w: R.Tensor((16, 8), "float32", "llvm:0")
        ) -> R.Tensor((4, 8), "float32", "llvm:0"):
            with R.dataflow():
                x1 = R.to_vdevice(x, "llvm:1")
                w1 = R.to_vdevice(w, "llvm:1")
                y = R.matmul(x1, w1)
                z = R.nn.relu(y)
                R.output(z)
            z0 = R.to_vdevice(z, "llvm:0")
            return z0

    tvm.ir.assert_structural_equal(PlaceOperators({"y": 1, "z": 1})(Before), Expected)


def test_nothing_placed_only_annotates_home():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((4, 16), "float32", "llvm:0"), w: R.Tensor((16, 8), "float32", "llvm:0")
        ) -> R.Tensor((4, 8), "float32", "llvm:0"):
            with R.dataflow():
                y = R.matmul(x, w)
                z = R.nn.relu(y)
                R.output(z)
            return z

    after = PlaceOperators({})(Before)
    tvm.ir.assert_structural_equal(after, Expected)
    tvm.ir.assert_structural_equal(PlaceOperators({})(after), Expected)  # idempotent


def test_copies_are_shared_and_constants_follow_their_consumer():
    @I.ir_module
    class Shared:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(x: R.Tensor((4, 4), "float32")):
            with R.dataflow():
                a = R.add(x, R.const(1.0, "float32"))
                b = R.multiply(x, x)
                c = R.add(a, b)
                R.output(c)
            return c

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(x: R.Tensor((4, 4), "float32", "llvm:0")) -> R.Tensor((4, 4), "float32", "llvm:0"):
            with R.dataflow():
                x1 = R.to_vdevice(x, "llvm:1")
                one = R.to_vdevice(R.const(1.0, "float32"), "llvm:1")
                a = R.add(x1, one)
                b = R.multiply(x1, x1)
                a0 = R.to_vdevice(a, "llvm:0")
                b0 = R.to_vdevice(b, "llvm:0")
                c = R.add(a0, b0)
                R.output(c)
            return c

    tvm.ir.assert_structural_equal(PlaceOperators({"a": 1, "b": 1})(Shared), Expected)


def test_errors_name_the_pass_and_the_bad_value():
    with pytest.raises(ValueError, match=r"PlaceOperators: device indices \{'y': 2\} out of range"):
        PlaceOperators({"y": 2})(Before)
    with pytest.raises(ValueError, match=r"PlaceOperators: unknown operator id\(s\) \['nope'\]"):
        PlaceOperators({"nope": 1})(Before)
    no_vdev = Before.clone()
    no_vdev = tvm.IRModule({"main": Before["main"]})
    with pytest.raises(ValueError, match="declares no vdevices; run DeclareVDevices first"):
        PlaceOperators({"y": 1})(no_vdev)
    with pytest.raises(ValueError, match="no function 'forward'"):
        PlaceOperators({}, func_name="forward")(Before)


def test_every_other_operator_placed_computes_the_same(two_cpus):
    """Numerically (the zoo-wide check is tests/runtime/test_executor.py): alternating devices,
    the most copies a placement can make, equal the single-device build."""
    model = load_zoo_model("bert-small:tiny")
    inputs = model.random_inputs(seed=1)
    ids = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    placement = Placement(tuple(d.name for d in two_cpus), {n: 1 for n in ids[1::2]})
    got = api.run(api.compile(model, two_cpus, placement), inputs)
    ref = api.reference_outputs(model, inputs, two_cpus[0])
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
