"""CUDA kernels travel as device code; a module that computes nothing on its GPU still builds."""

import shutil
import tarfile

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_hetero import api
from tvm_hetero.build import cuda_binary
from tvm_hetero.build.multi_device import BuildOptions, build
from tvm_hetero.build.vdevices import to_vdevice
from tvm_hetero.devices import cpu_device, cuda_device, resolve_device
from tvm_hetero.ir.workloads import transfer_module
from tvm_hetero.plan import Placement
from tvm_hetero.profiling.profiler import place_on
from tvm_hetero.runtime.executor import refilled_copies
from tvm_hetero.zoo import load_zoo_model

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")


@needs_nvcc
def test_saved_cuda_library_holds_a_fat_binary_for_every_asked_arch(tmp_path):
    model = load_zoo_model("mlp:tiny")
    gpu = cuda_device(0, "sm_80")
    options = BuildOptions(cuda_archs=("sm_90", "sm_80"))
    compiled = api.compile(model, [gpu], options=options)
    assert isinstance(compiled.deployment.libraries[0], cuda_binary.DeviceCodeExecutable)
    artifact = compiled.save(tmp_path / "mlp.tar")
    with tarfile.open(artifact) as tar:
        tar.extract("lib0.so", tmp_path, filter="data")
    # SASS for both, PTX of the newest; no CUDA source left to compile when it loads
    assert cuda_binary.device_code(tmp_path / "lib0.so") == [
        ("fatbin", [("sass", 80), ("sass", 90), ("ptx", 90)])
    ]


@needs_nvcc
def test_cpu_and_gpu_deployment_carries_device_code_only_in_the_gpu_library(tmp_path):
    model = load_zoo_model("lstm:tiny")
    devices = [cpu_device(), cuda_device(0)]
    rules = api.placement_from_rules(model, devices, {"matmul": "cuda:0"})
    compiled = api.compile(model, devices, rules)
    artifact = compiled.save(tmp_path / "lstm.tar")
    with tarfile.open(artifact) as tar:
        tar.extractall(tmp_path, filter="data")
    assert cuda_binary.device_code(tmp_path / "lib0.so") == []
    assert cuda_binary.device_code(tmp_path / "lib1.so") == [
        ("fatbin", [("sass", 90), ("ptx", 90)])
    ]


def test_library_blob_round_trips_and_what_we_pack_loads_and_runs(tmp_path):
    model = load_zoo_model("mlp:tiny")
    compiled = api.compile(model, [cpu_device()])
    executable = compiled.deployment.libraries[0]
    blob = cuda_binary.library_bin(executable.mod)
    parsed = cuda_binary.LibraryBin.parse(blob)
    assert [k for k, _ in parsed.modules] == ["relax.VMExecutable", "_lib"]
    assert parsed.to_bytes() == blob
    path = tmp_path / "packed.so"
    cuda_binary.export_with_blob(executable.mod, path, blob)  # our object file, TVM's loader
    assert cuda_binary.read_library_bin(path) == blob
    inputs = model.random_inputs()
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(inputs[i.name]) for i in model.inputs]).numpy()
    (want,) = api.run(compiled, inputs)
    np.testing.assert_array_equal(got, want)


def test_cuda_module_bytes_split_at_the_code_whatever_the_table_holds():
    table = bytes(range(7)) + (5).to_bytes(8, "little") + b"\x00" * 9  # a length that misleads
    code = b'extern "C" __global__ void k() {}'
    data = cuda_binary._str(b"cuda") + table + cuda_binary._str(code)
    assert cuda_binary.split_cuda_module(data) == ("cuda", table, code)


@pytest.mark.parametrize(
    ("archs", "flags"),
    [
        (["sm_90"], ["-gencode", "arch=compute_90,code=[sm_90,compute_90]"]),
        (
            ["sm_90", "sm_80", "sm_90"],
            [
                "-gencode",
                "arch=compute_80,code=sm_80",
                "-gencode",
                "arch=compute_90,code=[sm_90,compute_90]",
            ],
        ),
    ],
)
def test_gencode_flags_give_sass_per_arch_and_ptx_of_the_newest(archs, flags):
    assert cuda_binary.gencode_flags(archs) == flags


def test_module_computing_nothing_on_its_gpu_builds_with_the_gpu_declared():
    cpu, gpu = cpu_device(), cuda_device(0)
    copy = transfer_module(4096, "float32", to_vdevice(cpu), to_vdevice(gpu))  # EOP's link probe
    assert not isinstance(build(copy), cuda_binary.DeviceCodeExecutable)
    model = load_zoo_model("mlp:tiny")
    home_only = api.place(model, [cpu, gpu], Placement(("cpu", "cuda:0"), {}))
    assert not isinstance(build(home_only), cuda_binary.DeviceCodeExecutable)
    assert place_on(copy, [cpu]) is copy  # a workload declaring its devices keeps them


def test_cuda_and_cuda0_name_one_device():
    model = load_zoo_model("mlp:tiny")
    devices = [resolve_device("cpu"), resolve_device("cuda")]
    assert devices[1].name == "cuda:0"
    rules = api.placement_from_rules(model, devices, {"matmul": "cuda"})
    same = api.placement_from_rules(model, devices, {"matmul": "gpu:0"})
    assert rules == same and set(rules.assignment.values()) == {1}


@pytest.mark.parametrize(
    ("archs", "gpu", "runs"),
    [
        (["sm_80", "sm_90"], "8.0", True),  # SASS sm_80
        (["sm_80", "sm_90"], "8.6", True),  # SASS sm_80 runs on later minors of 8
        (["sm_80", "sm_90"], "10.0", True),  # PTX of sm_90, compiled by the driver
        (["sm_80", "sm_90"], "7.5", False),
        (["sm_90"], "8.9", False),
        (["sm_90a"], "9.0", True),
        (["sm_90a"], "10.0", False),  # arch-specific code and PTX run on 9.0 alone
    ],
)
def test_device_code_runs_where_sass_or_ptx_allows(archs, gpu, runs):
    from tvm_hetero.runtime.cuda import runs_on

    assert runs_on(archs, gpu) is runs


@needs_nvcc
def test_manifest_records_the_device_code_and_a_gpu_it_cannot_run_is_refused(tmp_path):
    from tvm_hetero.devices import SpecError
    from tvm_hetero.runtime.cuda import check_device_code
    from tvm_hetero.runtime.deployment import read_manifest

    model = load_zoo_model("mlp:tiny")
    options = BuildOptions(cuda_archs=("sm_80", "sm_90"))
    devices = [cpu_device(), cuda_device(0, "sm_80")]
    rules = api.placement_from_rules(model, devices, {"matmul": "cuda:0"})
    artifact = api.compile(model, devices, rules, options).save(tmp_path / "m.tar")
    assert read_manifest(artifact)["device_code"] == {"1": ["sm_80", "sm_90"]}

    class Turing:
        compute_version = "7.5"

    with pytest.raises(
        SpecError, match=r"compiled for sm_80, sm_90, .* \(sm_75\).*--cuda-arch sm_75"
    ):
        check_device_code("cuda:0", Turing(), ["sm_80", "sm_90"])


@needs_nvcc
def test_copies_onto_a_gpu_that_makes_no_output_are_refilled_each_run():
    """The executor fills one tensor per copy onto the GPU every run (a new one costs cudaMalloc
    and cudaFree); never a copy onto the home device, where the outputs are."""
    model = load_zoo_model("lstm:tiny")
    devices = [cpu_device(), cuda_device(0)]
    rules = api.placement_from_rules(model, devices, {"matmul": "cuda:0"})
    deployment = api.compile(model, devices, rules).deployment
    refilled = refilled_copies(deployment)
    copies = [(s.device, k) for s, k in zip(deployment.steps, refilled, strict=True)
              if s.kind == "copy"]  # fmt: skip
    assert {d for d, _ in copies} == {0, 1}
    assert all(k == (d == 1) for d, k in copies)
    assert not any(k for s, k in zip(deployment.steps, refilled, strict=True) if s.kind != "copy")
    gpu_home = devices[::-1]
    rules = api.placement_from_rules(model, gpu_home, {"matmul": "cpu"})
    deployment = api.compile(model, gpu_home, rules).deployment  # the copies go to the CPU
    assert {s.device for s in deployment.copies} == {0, 1}
    assert not any(refilled_copies(deployment))
