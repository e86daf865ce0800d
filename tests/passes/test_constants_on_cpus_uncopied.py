"""ConstantsOnCPUsUncopied and ConstantsToKernelDevices: in the profiling build, the rewrites
see a weight brought to a CPU vdevice as the weight, and its kernel gets it copied after."""

import numpy as np
import tvm
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_hetero.build.multi_device import BuildOptions, build, lower
from tvm_hetero.passes import ConstantsOnCPUsUncopied, ConstantsToKernelDevices
from tvm_hetero.runtime.vm import make_vm, run

W = np.random.default_rng(0).standard_normal((8, 8)).astype("float32")


@I.ir_module
class Weighted:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 8), "float32", "llvm:0")) -> R.Tensor((4, 8), "float32", "llvm:0"):
        with R.dataflow():
            x1 = R.to_vdevice(x, "llvm:1")
            w1 = R.to_vdevice(R.const(W), "llvm:1")
            y = R.matmul(x1, w1)
            y0 = R.to_vdevice(y, "llvm:0")
            R.output(y0)
        return y0


def test_a_weight_brought_to_a_cpu_is_the_weight():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((4, 8), "float32", "llvm:0"),
        ) -> R.Tensor((4, 8), "float32", "llvm:0"):
            with R.dataflow():
                x1 = R.to_vdevice(x, "llvm:1")
                w1 = R.const(W)
                y = R.matmul(x1, w1)
                y0 = R.to_vdevice(y, "llvm:0")
                R.output(y0)
            return y0

    tvm.ir.assert_structural_equal(ConstantsOnCPUsUncopied()(Weighted), Expected)


def test_weights_to_a_gpu_and_copies_of_values_stay():
    @I.ir_module
    class ToGpu:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("cuda", 0)]})

        @R.function
        def main(x: R.Tensor((4, 8), "float32", "llvm:0")) -> R.Tensor((4, 8), "float32", "llvm:0"):
            with R.dataflow():
                x1 = R.to_vdevice(x, "cuda:0")
                w1 = R.to_vdevice(R.const(W), "cuda:0")
                y = R.matmul(x1, w1)
                y0 = R.to_vdevice(y, "llvm:0")
                R.output(y0)
            return y0

    tvm.ir.assert_structural_equal(ConstantsOnCPUsUncopied()(ToGpu), ToGpu)


def test_a_kernel_off_the_home_device_gets_its_constants_copied():
    @I.ir_module
    class Kernels:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @T.prim_func(private=True, s_tir=True)
        def add(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32"),
                c: T.Buffer((4,), "float32")):  # fmt: skip
            for i in range(4):
                with T.sblock("c"):
                    vi = T.axis.remap("S", [i])
                    c[vi] = a[vi] + b[vi]

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:1")) -> R.Tensor((4,), "float32", "llvm:1"):
            cls = Kernels
            with R.dataflow():
                y = R.call_tir(cls.add, (x, R.const(W[0, :4])), R.Tensor((4,), "float32", "llvm:1"))
                R.output(y)
            return y

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @T.prim_func(private=True, s_tir=True)
        def add(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32"),
                c: T.Buffer((4,), "float32")):  # fmt: skip
            for i in range(4):
                with T.sblock("c"):
                    vi = T.axis.remap("S", [i])
                    c[vi] = a[vi] + b[vi]

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:1")) -> R.Tensor((4,), "float32", "llvm:1"):
            cls = Expected
            with R.dataflow():
                w = R.to_vdevice(R.const(W[0, :4]), "llvm:1")
                y = R.call_tir(cls.add, (x, w), R.Tensor((4,), "float32", "llvm:1"))
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(ConstantsToKernelDevices()(Kernels), Expected)
    home = Kernels.clone()
    home.update_global_info("vdevice", [Kernels.global_infos["vdevice"][1]])  # llvm:1 is home
    tvm.ir.assert_structural_equal(ConstantsToKernelDevices()(home), home)


def test_a_kernel_of_several_outputs_off_the_home_device_gets_its_constants_copied():
    """A ``call_tir`` that returns a tuple (a recurrent layer's loop kernel: outputs and
    states) on ``llvm:1``: its constant operand is copied there too (it was left on the home
    device, and the VM refused the call: mismatched device ids)."""

    @I.ir_module
    class Kernels:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @T.prim_func(private=True, s_tir=True)
        def both(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32"),
                 c: T.Buffer((4,), "float32"), d: T.Buffer((4,), "float32")):  # fmt: skip
            for i in range(4):
                with T.sblock("cd"):
                    vi = T.axis.remap("S", [i])
                    c[vi] = a[vi] + b[vi]
                    d[vi] = a[vi] * b[vi]

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:1")) -> R.Tensor((4,), "float32", "llvm:1"):
            cls = Kernels
            with R.dataflow():
                y = R.call_tir(
                    cls.both, (x, R.const(W[0, :4])),
                    [R.Tensor((4,), "float32", "llvm:1"), R.Tensor((4,), "float32", "llvm:1")],
                )  # fmt: skip
                z = y[1]
                R.output(z)
            return z

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @T.prim_func(private=True, s_tir=True)
        def both(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32"),
                 c: T.Buffer((4,), "float32"), d: T.Buffer((4,), "float32")):  # fmt: skip
            for i in range(4):
                with T.sblock("cd"):
                    vi = T.axis.remap("S", [i])
                    c[vi] = a[vi] + b[vi]
                    d[vi] = a[vi] * b[vi]

        @R.function
        def main(x: R.Tensor((4,), "float32", "llvm:1")) -> R.Tensor((4,), "float32", "llvm:1"):
            cls = Expected
            with R.dataflow():
                w = R.to_vdevice(R.const(W[0, :4]), "llvm:1")
                y = R.call_tir(
                    cls.both, (x, w),
                    [R.Tensor((4,), "float32", "llvm:1"), R.Tensor((4,), "float32", "llvm:1")],
                )  # fmt: skip
                z = y[1]
                R.output(z)
            return z

    tvm.ir.assert_structural_equal(ConstantsToKernelDevices()(Kernels), Expected)
    x = np.arange(4, dtype="float32")  # the profiling build (it runs the pass) computes it
    devs = [tvm.cpu(0), tvm.cpu(1)]
    (got,) = run(make_vm(build(Kernels, BuildOptions(fuse=False)), devs), [x], devs[1])
    np.testing.assert_allclose(got, x * W[0, :4], rtol=1e-6)


def test_the_profiling_build_computes_the_same_with_its_weights_rewritten():
    unfused = BuildOptions(fuse=False)  # its pipeline runs both passes
    x = np.random.default_rng(1).standard_normal((4, 8)).astype("float32")
    devs = [tvm.cpu(0), tvm.cpu(1)]
    for options in (unfused, BuildOptions()):
        (got,) = run(make_vm(build(Weighted, options), devs), [x], devs[0])
        np.testing.assert_allclose(got, x @ W, rtol=1e-5, atol=1e-5)
    lowered = lower(Weighted, unfused)
    packed = [b for b in lowered["main"].body.blocks[0].bindings if "to_vdevice" in str(b.value)]
    assert len(packed) == 3  # the input in, the (packed) weight to its kernel, the result out
