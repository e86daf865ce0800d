"""AnnotateOperatorSplits + RealizeOperatorSplits: exact IR (Before/Expected) and equal numbers."""

import json

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero.ir.attrs import SPLITS_ATTR
from tvm_hetero.ir.bindings import op_bindings
from tvm_hetero.ir.split_dims import split_dims
from tvm_hetero.passes import AnnotateOperatorSplits, PlaceOperators, RealizeOperatorSplits
from tvm_hetero.plan.eop import OpSplit, SplitPlan
from tvm_hetero.zoo import load_zoo_model


@I.ir_module
class MatmulRelu:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


def _realize(mod, splits):
    seq = tvm.transform.Sequential(
        [AnnotateOperatorSplits(splits), PlaceOperators({}), RealizeOperatorSplits()]
    )
    return seq(mod)


def test_rows_cut_twice_keep_their_shards_between_operators():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((8, 16), "float32", "llvm:0"), w: R.Tensor((16, 32), "float32", "llvm:0")
        ) -> R.Tensor((8, 32), "float32", "llvm:0"):
            with R.dataflow():
                x0 = R.strided_slice(x, axes=[0], begin=[0], end=[6])
                x1 = R.strided_slice(x, axes=[0], begin=[6], end=[8])
                x1d = R.to_vdevice(x1, "llvm:1")
                wd = R.to_vdevice(w, "llvm:1")
                y1 = R.matmul(x1d, wd)
                y0 = R.matmul(x0, w)
                z1 = R.nn.relu(y1)
                z0 = R.nn.relu(y0)
                z1h = R.to_vdevice(z1, "llvm:0")
                z = R.concat((z0, z1h), axis=0)
                R.output(z)
            return z

    before = MatmulRelu.clone()
    splits = {"y": {"dim": "M", "shares": [6, 2]}, "z": {"dim": "axis0", "shares": [6, 2]}}
    tvm.ir.assert_structural_equal(_realize(MatmulRelu, splits), Expected)
    tvm.ir.assert_structural_equal(MatmulRelu, before)  # the input is not mutated


def test_columns_cut_slices_the_weight_and_concatenates_columns():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((8, 16), "float32", "llvm:0"), w: R.Tensor((16, 32), "float32", "llvm:0")
        ) -> R.Tensor((8, 32), "float32", "llvm:0"):
            with R.dataflow():
                xd = R.to_vdevice(x, "llvm:1")
                w0 = R.strided_slice(w, axes=[1], begin=[0], end=[24])
                w1 = R.strided_slice(w, axes=[1], begin=[24], end=[32])
                w1d = R.to_vdevice(w1, "llvm:1")
                y1 = R.matmul(xd, w1d)
                y0 = R.matmul(x, w0)
                y1h = R.to_vdevice(y1, "llvm:0")
                y = R.concat((y0, y1h), axis=1)
                z = R.nn.relu(y)
                R.output(z)
            return z

    after = _realize(MatmulRelu, {"y": {"dim": "N", "shares": [24, 8]}})
    tvm.ir.assert_structural_equal(after, Expected)


def test_a_constant_weight_is_sliced_at_compile_time_into_constants():
    """A weight bound as a constant is cut into two constants, not ``strided_slice`` at run
    time: the build folds and lays out constant weights for the kernel's rule, which a sliced
    one escaped (each half of a cut ResNet-18 3x3 convolution ran twice its time)."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((8, 16), "float32", "llvm:0"),
            w0: R.Tensor((16, 24), "float32"),
            w1: R.Tensor((16, 8), "float32"),
        ) -> R.Tensor((8, 32), "float32", "llvm:0"):
            with R.dataflow():
                xd = R.to_vdevice(x, "llvm:1")
                w1d = R.to_vdevice(w1, "llvm:1")
                y1 = R.matmul(xd, w1d)
                y0 = R.matmul(x, w0)
                y1h = R.to_vdevice(y1, "llvm:0")
                y = R.concat((y0, y1h), axis=1)
                z = R.nn.relu(y)
                R.output(z)
            return z

    weight = np.random.default_rng(0).standard_normal((16, 32)).astype("float32")
    before = relax.transform.BindParams("main", {"w": weight})(MatmulRelu)
    after = _realize(before, {"y": {"dim": "N", "shares": [24, 8]}})
    halves = {"w0": weight[:, :24].copy(), "w1": weight[:, 24:].copy()}
    tvm.ir.assert_structural_equal(after, relax.transform.BindParams("main", halves)(Expected))
    x = np.random.default_rng(1).standard_normal((8, 16)).astype("float32")
    got = _run_on_cpu(after, x)
    np.testing.assert_allclose(got, np.maximum(x @ weight, 0), rtol=1e-5, atol=1e-5)


def _run_on_cpu(mod, *args):
    """``mod`` built for the CPU (its vdevices all CPUs of this process) and run on ``args``."""
    mod = relax.transform.RealizeVDevice()(mod)
    exe = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(exe, [tvm.cpu(0), tvm.cpu(1)])
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


def test_convolution_rows_overlap_by_the_halo_with_their_own_padding():
    @I.ir_module
    class Before:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(x: R.Tensor((1, 2, 8, 8), "float32"), w: R.Tensor((4, 2, 3, 3), "float32")):
            with R.dataflow():
                y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
                R.output(y)
            return y

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((1, 2, 8, 8), "float32", "llvm:0"),
            w: R.Tensor((4, 2, 3, 3), "float32", "llvm:0"),
        ) -> R.Tensor((1, 4, 8, 8), "float32", "llvm:0"):
            with R.dataflow():
                x0 = R.strided_slice(x, axes=[2], begin=[0], end=[6])
                x1 = R.strided_slice(x, axes=[2], begin=[4], end=[8])
                x1d = R.to_vdevice(x1, "llvm:1")
                wd = R.to_vdevice(w, "llvm:1")
                y1 = R.nn.conv2d(x1d, wd, padding=[0, 1, 1, 1])
                y0 = R.nn.conv2d(x0, w, padding=[1, 1, 0, 1])
                y1h = R.to_vdevice(y1, "llvm:0")
                y = R.concat((y0, y1h), axis=2)
                R.output(y)
            return y

    after = _realize(Before, {"y": {"dim": "H", "shares": [5, 3]}})
    tvm.ir.assert_structural_equal(after, Expected)


@I.ir_module
class MatmulRelu3:
    I.module_global_infos(
        {"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1), I.vdevice("llvm", 2)]}
    )

    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


def test_three_devices_each_get_a_shard_and_keep_it_between_operators():
    @I.ir_module
    class Expected:
        I.module_global_infos(
            {"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1), I.vdevice("llvm", 2)]}
        )

        @R.function
        def main(
            x: R.Tensor((8, 16), "float32", "llvm:0"), w: R.Tensor((16, 32), "float32", "llvm:0")
        ) -> R.Tensor((8, 32), "float32", "llvm:0"):
            with R.dataflow():
                x0 = R.strided_slice(x, axes=[0], begin=[0], end=[3])
                x1 = R.strided_slice(x, axes=[0], begin=[3], end=[6])
                x2 = R.strided_slice(x, axes=[0], begin=[6], end=[8])
                x1d = R.to_vdevice(x1, "llvm:1")
                x2d = R.to_vdevice(x2, "llvm:2")
                w1 = R.to_vdevice(w, "llvm:1")
                w2 = R.to_vdevice(w, "llvm:2")
                y1 = R.matmul(x1d, w1)
                y2 = R.matmul(x2d, w2)
                y0 = R.matmul(x0, w)
                z1 = R.nn.relu(y1)
                z2 = R.nn.relu(y2)
                z0 = R.nn.relu(y0)
                z1h = R.to_vdevice(z1, "llvm:0")
                z2h = R.to_vdevice(z2, "llvm:0")
                z = R.concat((z0, z1h, z2h), axis=0)
                R.output(z)
            return z

    splits = {"y": {"dim": "M", "shares": [3, 3, 2]}, "z": {"dim": "axis0", "shares": [3, 3, 2]}}
    tvm.ir.assert_structural_equal(_realize(MatmulRelu3, splits), Expected)


def test_a_zero_share_leaves_its_device_out():
    @I.ir_module
    class Expected:
        I.module_global_infos(
            {"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1), I.vdevice("llvm", 2)]}
        )

        @R.function
        def main(
            x: R.Tensor((8, 16), "float32", "llvm:0"), w: R.Tensor((16, 32), "float32", "llvm:0")
        ) -> R.Tensor((8, 32), "float32", "llvm:0"):
            with R.dataflow():
                xd = R.to_vdevice(x, "llvm:2")
                w0 = R.strided_slice(w, axes=[1], begin=[0], end=[20])
                w2 = R.strided_slice(w, axes=[1], begin=[20], end=[32])
                w2d = R.to_vdevice(w2, "llvm:2")
                y2 = R.matmul(xd, w2d)
                y0 = R.matmul(x, w0)
                y2h = R.to_vdevice(y2, "llvm:0")
                y = R.concat((y0, y2h), axis=1)
                z = R.nn.relu(y)
                R.output(z)
            return z

    after = _realize(MatmulRelu3, {"y": {"dim": "N", "shares": [20, 0, 12]}})
    tvm.ir.assert_structural_equal(after, Expected)


def test_a_single_share_on_another_device_moves_the_operator_whole():
    @I.ir_module
    class Expected:
        I.module_global_infos(
            {"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1), I.vdevice("llvm", 2)]}
        )

        @R.function
        def main(
            x: R.Tensor((8, 16), "float32", "llvm:0"), w: R.Tensor((16, 32), "float32", "llvm:0")
        ) -> R.Tensor((8, 32), "float32", "llvm:0"):
            with R.dataflow():
                xd = R.to_vdevice(x, "llvm:2")
                wd = R.to_vdevice(w, "llvm:2")
                y2 = R.matmul(xd, wd)
                y = R.to_vdevice(y2, "llvm:0")
                z = R.nn.relu(y)
                R.output(z)
            return z

    after = _realize(MatmulRelu3, {"y": {"dim": "M", "shares": [0, 0, 8]}})
    tvm.ir.assert_structural_equal(after, Expected)


def test_convolution_rows_on_three_devices_overlap_at_each_inner_boundary():
    @I.ir_module
    class Before:
        I.module_global_infos(
            {"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1), I.vdevice("llvm", 2)]}
        )

        @R.function
        def main(x: R.Tensor((1, 2, 9, 9), "float32"), w: R.Tensor((4, 2, 3, 3), "float32")):
            with R.dataflow():
                y = R.nn.conv2d(x, w, strides=[2, 2], padding=[1, 1, 1, 1])
                R.output(y)
            return y

    @I.ir_module
    class Expected:
        I.module_global_infos(
            {"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1), I.vdevice("llvm", 2)]}
        )

        @R.function
        def main(
            x: R.Tensor((1, 2, 9, 9), "float32", "llvm:0"),
            w: R.Tensor((4, 2, 3, 3), "float32", "llvm:0"),
        ) -> R.Tensor((1, 4, 5, 5), "float32", "llvm:0"):
            with R.dataflow():
                # output rows 0-1 read input rows -1..3, rows 2-3 read 3..7, row 4 reads 7..9
                x0 = R.strided_slice(x, axes=[2], begin=[0], end=[4])
                x1 = R.strided_slice(x, axes=[2], begin=[3], end=[8])
                x2 = R.strided_slice(x, axes=[2], begin=[7], end=[9])
                x1d = R.to_vdevice(x1, "llvm:1")
                x2d = R.to_vdevice(x2, "llvm:2")
                w1 = R.to_vdevice(w, "llvm:1")
                w2 = R.to_vdevice(w, "llvm:2")
                y1 = R.nn.conv2d(x1d, w1, strides=[2, 2], padding=[0, 1, 0, 1])
                y2 = R.nn.conv2d(x2d, w2, strides=[2, 2], padding=[0, 1, 1, 1])
                y0 = R.nn.conv2d(x0, w, strides=[2, 2], padding=[1, 1, 0, 1])
                y1h = R.to_vdevice(y1, "llvm:0")
                y2h = R.to_vdevice(y2, "llvm:0")
                y = R.concat((y0, y1h, y2h), axis=2)
                R.output(y)
            return y

    after = _realize(Before, {"y": {"dim": "H", "shares": [2, 2, 1]}})
    tvm.ir.assert_structural_equal(after, Expected)


def test_annotation_is_checked_and_recorded():
    out = AnnotateOperatorSplits({"y": {"dim": "M", "shares": [6, 2]}})(MatmulRelu)
    assert json.loads(str(out["main"].attrs[SPLITS_ATTR])) == {"y": {"dim": "M", "shares": [6, 2]}}
    with pytest.raises(ValueError, match=r"cannot be cut along 'H'; allowed: \['M', 'N'\]"):
        AnnotateOperatorSplits({"y": {"dim": "H", "shares": [6, 2]}})(MatmulRelu)
    with pytest.raises(ValueError, match="sum to 8"):
        AnnotateOperatorSplits({"y": {"dim": "M", "shares": [6, 3]}})(MatmulRelu)
    with pytest.raises(ValueError, match="the entry of operator 'y' must be"):
        AnnotateOperatorSplits({"y": {"shares": [6, 2]}})
    with pytest.raises(ValueError, match="unknown operator id 'nope'"):
        AnnotateOperatorSplits({"nope": {"dim": "M", "shares": [6, 2]}})(MatmulRelu)
    with pytest.raises(ValueError, match="the shares use 3 devices and the module declares 2"):
        AnnotateOperatorSplits({"y": {"dim": "M", "shares": [4, 2, 2]}})(MatmulRelu)
    out = AnnotateOperatorSplits({"y": {"dim": "M", "shares": [6, 2, 0]}})(MatmulRelu)
    assert SPLITS_ATTR in out["main"].attrs  # trailing zero shares need no vdevice


def _cut_everything(model, fraction=3):
    """A plan cutting every operator that can be cut, along its first dimension."""
    splits = []
    for b in op_bindings(model.mod["main"]):
        dims = split_dims(b.call)
        if dims:
            dim = next(iter(dims.values()))
            n1 = max(1, dim.extent // fraction)
            shares = (dim.extent - n1, n1)
            splits.append(OpSplit(b.node_id, str(b.call.op.name), dim.name, dim.extent, shares,
                                  (0.0, 0.0), 0.0, 0.0))  # fmt: skip
    return SplitPlan("test", ("cpu", "cpu:1"), tuple(splits))


@pytest.mark.parametrize(
    "name",
    [
        "lstm",
        "bert-small",
        "mobilenet",
        *(pytest.param(n, marks=pytest.mark.slow) for n in ("gru", "resnet18")),
    ],
)  # make test-slow: gru (19 s) makes lstm's cuts; resnet18's are cut three ways below
def test_zoo_models_cut_everywhere_compute_the_same(name, two_cpus):
    model = load_zoo_model(f"{name}:tiny")
    plan = _cut_everything(model)
    assert plan.splits, "nothing to cut"
    inputs = model.random_inputs()
    compiled = api.compile(model, two_cpus, plan)
    got = api.run(compiled, inputs)
    want = api.reference_outputs(model, inputs, two_cpus[0])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_three_cpus_cut_everywhere_compute_the_same(two_cpus):
    """Every cuttable operator of a CNN and a transformer in three shards (one device idle for
    some): the same numbers as the unpartitioned module."""
    from tvm_hetero.devices import cpu_device

    devices = [*two_cpus, cpu_device(2)]
    for name in ("resnet18:tiny",):  # BERT three ways: test_partition_spatial_tiles
        model = load_zoo_model(name)
        splits = []
        for k, b in enumerate(op_bindings(model.mod["main"])):
            dims = split_dims(b.call)
            if dims:
                dim = list(dims.values())[k % len(dims)]
                n1, n2 = dim.extent // 3, (dim.extent // 4 if k % 4 else 0)
                shares = (dim.extent - n1 - n2, n1, n2)
                splits.append(OpSplit(b.node_id, str(b.call.op.name), dim.name, dim.extent,
                                      shares, (0.0,) * 3, 0.0, 0.0))  # fmt: skip
        plan = SplitPlan("test", tuple(d.name for d in devices), tuple(splits))
        inputs = model.random_inputs()
        got = api.run(api.compile(model, devices, plan), inputs)
        want = api.reference_outputs(model, inputs, devices[0])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_the_accelerators_shard_is_emitted_first():
    """A GPU home device and a CPU second device: the GPU shard is launched before the CPU's."""
    mod = MatmulRelu.clone()
    gpu_home = tvm.IRModule(mod.functions, global_infos={"vdevice": [
        I.vdevice("cuda", 0), I.vdevice("llvm", 0)]})  # fmt: skip
    after = _realize(gpu_home, {"y": {"dim": "M", "shares": [6, 2]}})
    names = [b.var.name for b in after["main"].body.blocks[0].bindings]
    assert names.index("y_0") < names.index("y_1")
    after = _realize(MatmulRelu, {"y": {"dim": "M", "shares": [6, 2]}})
    names = [b.var.name for b in after["main"].body.blocks[0].bindings]
    assert names.index("y_1") < names.index("y_0")
    assert {"y_in0_0", "y_in0_1", "y_in0_dev", "y_in1_dev", "y_1_home"} <= set(names)


def test_a_cut_between_cpu_and_cuda_builds_scheduled_gpu_kernels():
    """Compile-only (no GPU here): every shard on the GPU gets a scheduled CUDA kernel."""
    from tvm_hetero.build.multi_device import module_kinds
    from tvm_hetero.devices.discover import resolve_device

    model = load_zoo_model("mlp:tiny")
    devices = [resolve_device("cpu"), resolve_device("cuda:0")]
    plan = _cut_everything(model, fraction=2)
    plan = SplitPlan("test", ("cpu", "cuda:0"), plan.splits)
    compiled = api.compile(model, devices, plan)
    assert "cuda" in module_kinds(compiled.deployment.libraries[1].mod)  # the GPU's own library
    assert "cuda" not in module_kinds(compiled.deployment.libraries[0].mod)
    gpu = [c for c in api.kernel_schedules(compiled) if c.target.startswith("cuda")]
    assert gpu and all(c.label.startswith("dlight:") for c in gpu), gpu
