"""CarvePipelineStages and StripStageBoundaries: structurally and numerically."""

import numpy as np
import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.build.multi_device import build
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends.load import load_model
from tvm_hetero.passes import CarvePipelineStages, StripStageBoundaries
from tvm_hetero.runtime.executor import Executor
from tvm_hetero.runtime.vm import make_vm, run

F32 = "float32"


@I.ir_module
class Placed:
    """A three-layer chain placed as two stages: ``a, b`` on llvm:0, ``c`` on llvm:1, with a
    hand-placed mark after ``b``; the result copied home."""

    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.exp(a)
            m = R.call_pure_packed(
                "tvm_hetero.stage_boundary", b, ty_args=R.Tensor((4, 8), F32, "llvm:0")
            )
            m1 = R.to_vdevice(m, "llvm:1")
            c = R.sigmoid(m1)
            c0 = R.to_vdevice(c, "llvm:0")
            R.output(c0)
        return c0


@I.ir_module
class Expected:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def unit0_d0(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.exp(a)
            m: R.Tensor((4, 8), F32, "llvm:0") = b
            R.output(m)
        return m

    @R.function
    def unit1_d1(m1: R.Tensor((4, 8), F32, "llvm:1")) -> R.Tensor((4, 8), F32, "llvm:1"):
        R.func_attr({"tvm_hetero.unit_device": 1})
        with R.dataflow():
            c = R.sigmoid(m1)
            R.output(c)
        return c

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        cls = Expected
        with R.dataflow():
            m = cls.unit0_d0(x)
            m1 = R.to_vdevice(m, "llvm:1")
            c = cls.unit1_d1(m1)
            c0 = R.to_vdevice(c, "llvm:0")
            R.output(c0)
        return c0


STAGES = [["a", "b", "m"], ["c"]]


def test_each_stage_is_one_function_on_its_device_and_the_mark_is_gone():
    after = CarvePipelineStages(STAGES)(Placed)
    tvm.ir.assert_structural_equal(after, Expected)
    assert "stage_boundary" not in after.script()


def test_stages_compute_what_the_placed_model_computed():
    after = CarvePipelineStages(STAGES)(Placed)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(F32)
    devs = [tvm.cpu(0), tvm.cpu(1)]
    ref = run(make_vm(build(StripStageBoundaries()(Placed)), devs), [x], devs[0])
    got = run(make_vm(build(after), devs), [x], devs[0])
    np.testing.assert_array_equal(ref[0], got[0])
    np.testing.assert_allclose(got[0], 1 / (1 + np.exp(-np.exp(np.maximum(x, 0)))), rtol=1e-6)


def test_the_input_module_is_left_unchanged():
    before = Placed.script()
    CarvePipelineStages(STAGES)(Placed)
    assert Placed.script() == before


@I.ir_module
class Marked:
    @R.function
    def main(x: R.Tensor((4, 8), F32)) -> R.Tensor((4, 8), F32):
        with R.dataflow():
            a = R.nn.relu(x)
            m = R.call_pure_packed("tvm_hetero.stage_boundary", a, ty_args=R.Tensor((4, 8), F32))
            c = R.exp(m)
            R.output(c)
        return c


@I.ir_module
class Unmarked:
    @R.function
    def main(x: R.Tensor((4, 8), F32)) -> R.Tensor((4, 8), F32):
        with R.dataflow():
            a = R.nn.relu(x)
            m: R.Tensor((4, 8), F32) = a
            c = R.exp(m)
            R.output(c)
        return c


def test_marks_become_aliases_and_a_marked_model_builds():
    tvm.ir.assert_structural_equal(StripStageBoundaries()(Marked), Unmarked)
    tvm.ir.assert_structural_equal(StripStageBoundaries()(Unmarked), Unmarked)
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(F32)
    compiled = api.compile(load_model(Marked, name="marked"), [cpu_device(0)])  # strips it
    with Executor(compiled.deployment) as ex:
        got = ex.run([x])
    np.testing.assert_allclose(got[0], np.exp(np.maximum(x, 0)), rtol=1e-6)


def test_bad_stages_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="in stages 0 and 1"):
        CarvePipelineStages([["a"], ["a", "b"]])
    with pytest.raises(ValueError, match="have no operators"):
        CarvePipelineStages([["a"], []])
    with pytest.raises(ValueError, match="unknown operator id"):
        CarvePipelineStages([["nope"]])(Placed)
    with pytest.raises(ValueError, match="reads a result of stage 1"):
        CarvePipelineStages([["a", "c"], ["b", "m"]])(Placed)
