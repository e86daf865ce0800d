import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_hetero.passes import InferKernelVDevices, RestoreKernelTargets

CUDA = {"kind": "cuda", "arch": "sm_80"}


def test_infer_kernel_vdevices_sets_output_vdevice_and_copies_shared_kernels():
    @I.ir_module
    class Before:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice(CUDA, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def add_one(x: T.Buffer((T.int64(4),), "float32"), y: T.Buffer((T.int64(4),), "float32")):
            for i in range(T.int64(4)):
                with T.sblock("add"):
                    vi = T.axis.spatial(T.int64(4), i)
                    y[vi] = x[vi] + T.float32(1)

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:0")) -> R.Tensor((4,), "float32", "llvm:0"):
            cls = Before
            with R.dataflow():
                a = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
                g = R.to_vdevice(a, "cuda:0")
                b = R.call_tir(cls.add_one, (g,), out_ty=R.Tensor((4,), "float32"))
                c = R.to_vdevice(b, "llvm:0")
                R.output(c)
            return c

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice(CUDA, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def add_one(x: T.Buffer((T.int64(4),), "float32"), y: T.Buffer((T.int64(4),), "float32")):
            for i in range(T.int64(4)):
                with T.sblock("add"):
                    vi = T.axis.spatial(T.int64(4), i)
                    y[vi] = x[vi] + T.float32(1)

        @T.prim_func(private=True, s_tir=True)
        def add_one_cuda(
            x: T.Buffer((T.int64(4),), "float32"), y: T.Buffer((T.int64(4),), "float32")
        ):
            T.func_attr({"target": T.target(CUDA)})
            for i in range(T.int64(4)):
                with T.sblock("add"):
                    vi = T.axis.spatial(T.int64(4), i)
                    y[vi] = x[vi] + T.float32(1)

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:0")) -> R.Tensor((4,), "float32", "llvm:0"):
            cls = Expected
            with R.dataflow():
                a = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32", "llvm:0"))
                g = R.to_vdevice(a, "cuda:0")
                b = R.call_tir(cls.add_one_cuda, (g,), out_ty=R.Tensor((4,), "float32", "cuda:0"))
                c = R.to_vdevice(b, "llvm:0")
                R.output(c)
            return c

    before = Before.clone()
    after = InferKernelVDevices()(Before)
    tvm.ir.assert_structural_equal(after, Expected)
    tvm.ir.assert_structural_equal(Before, before)
    tvm.ir.assert_structural_equal(InferKernelVDevices()(after), Expected)  # idempotent


def _restore_case(target_attr):
    @I.ir_module
    class Mod:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice(CUDA, 0)]})

        @T.prim_func(private=True, s_tir=True)
        def double(x: T.Buffer((T.int64(4),), "float32"), y: T.Buffer((T.int64(4),), "float32")):
            T.func_attr(target_attr)
            for i in range(T.int64(4)):
                with T.sblock("double"):
                    vi = T.axis.spatial(T.int64(4), i)
                    y[vi] = x[vi] * T.float32(2)

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:0")) -> R.Tensor((4,), "float32", "llvm:0"):
            cls = Mod
            with R.dataflow():
                g = R.to_vdevice(x, "cuda:0")
                b = R.call_tir(cls.double, (g,), out_ty=R.Tensor((4,), "float32", "cuda:0"))
                c = R.to_vdevice(b, "llvm:0")
                R.output(c)
            return c

    return Mod


def test_restore_kernel_targets_from_the_calling_vdevice():
    before = _restore_case({"tirx.noalias": True})
    expected = _restore_case({"tirx.noalias": True, "target": T.target(CUDA)})
    after = RestoreKernelTargets()(before)
    tvm.ir.assert_structural_equal(after, expected)
    tvm.ir.assert_structural_equal(RestoreKernelTargets()(after), expected)
    assert "target" not in before["double"].attrs  # input not mutated


def test_restore_kernel_targets_keeps_existing_target_and_needs_vdevices():
    before = _restore_case({"target": T.target({"kind": "llvm"})})
    tvm.ir.assert_structural_equal(RestoreKernelTargets()(before), before)
    bare = tvm.IRModule({"double": before["double"]})
    with pytest.raises(ValueError, match="RestoreKernelTargets: the module declares no vdevices"):
        RestoreKernelTargets()(bare)
