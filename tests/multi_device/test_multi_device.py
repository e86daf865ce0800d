import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.build.multi_device import BuildError, BuildOptions, build, lower, module_kinds
from tvm_hetero.schedules import apply as schedules_apply


@I.ir_module
class Unsplit:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0)]})

    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32")):
        with R.dataflow():
            y = R.nn.relu(R.matmul(x, w))
            R.output(y)
        return y


@I.ir_module
class SplitOnTwoCpus:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32")):
        with R.dataflow():
            parts = R.split(x, [3], axis=0)
            a = parts[0]
            b = parts[1]
            b1 = R.to_vdevice(b, "llvm:1")
            w1 = R.to_vdevice(w, "llvm:1")
            yb = R.nn.relu(R.matmul(b1, w1))
            ya = R.nn.relu(R.matmul(a, w))
            yb0 = R.to_vdevice(yb, "llvm:0")
            out = R.concat([ya, yb0], axis=0)
            R.output(out)
        return out


RAMP = np.arange(8, dtype="float32").reshape(2, 4)


@I.ir_module
class ScanOfConstants:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((2, 4), "float32", "llvm:0")):
        with R.dataflow():
            c = R.cumsum(R.const(RAMP), axis=1)
            y = R.add(x, c)
            R.output(y)
        return y


def _run(mod, devices, *args):
    vm = relax.VirtualMachine(build(mod), devices)
    return vm["main"](*[tvm.runtime.tensor(a, devices[0]) for a in args]).numpy()


def test_split_compute_on_llvm1_concat_equals_unsplit():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype("float32")
    w = rng.standard_normal((16, 32)).astype("float32")
    ref = _run(Unsplit, [tvm.cpu(0)], x, w)
    got = _run(SplitOnTwoCpus, [tvm.cpu(0), tvm.cpu(1)], x, w)
    np.testing.assert_allclose(ref, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got, ref)


def test_a_scan_of_constants_runs_on_the_home_device():
    """A ``cumsum`` of a constant (DETR's position embedding) has no vdevice to take a target
    from: TVM's dispatch runs on the home device's (vdevice 0), where the build had failed
    ("Target not found")."""
    x = np.ones((2, 4), "float32")
    got = _run(ScanOfConstants, [tvm.cpu(0), tvm.cpu(1)], x)
    np.testing.assert_allclose(got, x + np.cumsum(RAMP, axis=1), rtol=1e-6)


def test_fusion_stays_within_one_device_and_targets_are_restored():
    lowered = lower(SplitOnTwoCpus)
    kernels = {
        gv.name_hint: f for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
    }
    fused = [n for n in kernels if n.startswith("fused_")]
    assert fused  # matmul + relu fused per device
    assert all(f.attrs["target"].kind.name == "llvm" for f in kernels.values())
    text = lowered["main"].script()
    # the copy is still a separate step: nothing fused across to_vdevice
    assert text.count("R.to_vdevice") == 3


def test_an_inference_batch_norm_fuses_with_its_neighbours():
    """``LegalizeWithFastMath``'s batch norm is one kernel returning the operator's tuple, as
    TVM's is (a tuple built around its output stayed bound until fusion, a second reader of
    the output, and DenseNet's ReLU after each concatenation and normalization ran as a
    kernel of its own)."""
    rng = np.random.default_rng(0)
    stats = [relax.const(rng.uniform(0.5, 2, 8).astype("float32")) for _ in range(4)]
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((1, 4, 5, 5), "float32"))
    b = relax.Var("b", relax.TensorType((1, 4, 5, 5), "float32"))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            y = relax.op.nn.batch_norm(
                relax.op.concat([a, b], axis=1), *stats, axis=1, training=False
            )
            out = bb.emit_output(relax.op.nn.relu(relax.TupleGetItem(y, 0)))
        bb.emit_func_output(out)
    mod = bb.get()
    mod.update_global_info("vdevice", [I.vdevice("llvm", 0)])
    kernels = [gv.name_hint for gv, f in lower(mod).functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)]  # fmt: skip
    assert kernels == ["fused_concatenate_batch_norm_relu"], kernels
    x = [rng.standard_normal((1, 4, 5, 5)).astype("float32") for _ in range(2)]
    got = _run(mod, [tvm.cpu(0)], *x)
    gamma, beta, mean, var = (s.value.numpy()[:, None, None] for s in stats)
    want = (np.concatenate(x, 1) - mean) / np.sqrt(var + 1e-5) * gamma + beta
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-5, atol=1e-6)


@I.ir_module
class CpuAndCuda:
    I.module_global_infos(
        {"vdevice": [I.vdevice("llvm", 0), I.vdevice({"kind": "cuda", "arch": "sm_80"}, 0)]}
    )

    @R.function
    def main(x: R.Tensor((8, 16), "float32"), w: R.Tensor((16, 32), "float32")):
        with R.dataflow():
            x1 = R.to_vdevice(x, "cuda:0")
            w1 = R.to_vdevice(w, "cuda:0")
            y = R.nn.softmax(R.matmul(x1, w1), axis=-1)
            y0 = R.to_vdevice(y, "llvm:0")
            z = R.nn.relu(y0)
            R.output(z)
        return z


def test_cpu_plus_cuda_compiles_without_a_gpu():
    ex = build(CpuAndCuda)
    assert "cuda" in module_kinds(ex.mod)
    cuda = next(m for m in _walk(ex.mod) if m.kind == "cuda")
    assert "__global__" in cuda.inspect_source()
    lowered = lower(CpuAndCuda)
    gpu = [
        f
        for _, f in lowered.functions_items()
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs["target"].kind.name == "cuda"
    ]
    assert gpu and all(f.attrs.get("tirx.is_scheduled") for f in gpu)


def _walk(mod):
    yield mod
    for m in mod.imports:
        yield from _walk(m)


def test_unscheduled_cuda_kernel_fails_loudly(monkeypatch):
    monkeypatch.setattr(schedules_apply, "GPU_RULES", ())
    with pytest.raises(BuildError, match="CUDA kernels left unscheduled"):
        build(CpuAndCuda)


def test_module_without_vdevices_is_rejected():
    mod = tvm.IRModule({"main": Unsplit["main"]})
    with pytest.raises(BuildError, match="declares no vdevices"):
        build(mod)


def test_dlight_cpu_schedule_gives_same_numbers():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 16)).astype("float32")
    w = rng.standard_normal((16, 32)).astype("float32")
    dev = [tvm.cpu(0), tvm.cpu(1)]
    ex = build(SplitOnTwoCpus, BuildOptions("dlight"))
    got = relax.VirtualMachine(ex, dev)["main"](
        tvm.runtime.tensor(x), tvm.runtime.tensor(w)
    ).numpy()
    np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def test_bad_build_options():
    with pytest.raises(
        ValueError,
        match="unknown CPU schedule 'fast'; choose from rules, default, dlight, metaschedule",
    ):
        BuildOptions("fast")
    with pytest.raises(ValueError, match="needs ms_database"):
        BuildOptions("metaschedule")
    with pytest.raises(ValueError, match=r"has no database_tuning_record\.json"):
        BuildOptions("metaschedule", "/nonexistent")


@pytest.mark.gpu
def test_cpu_plus_cuda_runs_on_a_gpu():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 16)).astype("float32")
    w = rng.standard_normal((16, 32)).astype("float32")
    got = _run(CpuAndCuda, [tvm.cpu(0), tvm.cuda(0)], x, w)
    logits = x @ w
    e = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)


def test_metaschedule_database_records_are_applied(tmp_path, two_cpus):
    """A database record (here: parallelise the matmul's outer loop) replaces the default kernel."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from tvm_hetero import api
    from tvm_hetero._compat import normalize_kernel
    from tvm_hetero.plan import Placement
    from tvm_hetero.zoo import load_zoo_model

    model = load_zoo_model("mlp:tiny")
    placed = api.place(model, two_cpus, Placement(("cpu", "cpu:1"), {"matmul1": 1}))
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    tuned = []
    for gv, f in lower(placed, BuildOptions("default")).functions_items():
        if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in gv.name_hint:
            task = normalize_kernel(f)
            sch = Schedule(task)
            sch.parallel(sch.get_loops(sch.get_sblock("matmul", func_name="main"))[0])
            workload = db.commit_workload(task)
            db.commit_tuning_record(
                ms.database.TuningRecord(sch.trace, workload, [1e-6], f.attrs["target"])
            )
            tuned.append(gv.name_hint)
    assert len(tuned) == 2

    options = BuildOptions("metaschedule", str(tmp_path))
    key = options.mode_key
    assert key.startswith("metaschedule:")
    lowered = lower(placed, options)
    for name in tuned:
        assert lowered[name].attrs["tirx.is_scheduled"]
        assert "T.parallel" in lowered[name].script()
    assert len(lowered.global_infos["vdevice"]) == 2
    inputs = model.random_inputs()
    compiled = api.compile(model, two_cpus, Placement(("cpu", "cpu:1"), {"matmul1": 1}), options)
    np.testing.assert_allclose(
        api.run(compiled, inputs)[0],
        api.reference_outputs(model, inputs, two_cpus[0])[0],
        rtol=1e-5,
        atol=1e-6,
    )
    db.commit_tuning_record(
        ms.database.TuningRecord(sch.trace, workload, [2e-6], f.attrs["target"])
    )
    assert options.mode_key != key  # measurements taken with older records are not served
