"""CUDA graphs for GPU units: compiled here, no GPU needed (issue 58's compile-only checks)."""

import numpy as np
import pytest
from tvm.relax import VMExecutable

from tvm_hetero import api
from tvm_hetero.build.multi_device import BuildOptions
from tvm_hetero.cli.common import build_options
from tvm_hetero.cli.main import build_parser
from tvm_hetero.devices import cpu_device, cuda_device
from tvm_hetero.zoo import load_zoo_model

CAPTURE = "vm.builtin.cuda_graph.run_or_capture"


def _text(executable) -> str:
    return VMExecutable(executable.mod).as_text()


@pytest.fixture(scope="module")
def bert():
    return load_zoo_model("bert-small:tiny")


@pytest.mark.parametrize("graph", [True, False])
def test_gpu_build_captures_unless_told_not_to(bert, graph):
    compiled = api.compile(bert, [cuda_device(0)], options=BuildOptions(cuda_graph=graph))
    text = _text(compiled.deployment.libraries[0])
    assert (CAPTURE in text) is graph
    assert ("vm.builtin.cuda_graph.get_cached_alloc" in text) is graph


def test_cpu_and_gpu_deployment_captures_in_the_gpu_library_only(bert):
    devices = [cpu_device(), cuda_device(0)]
    # the embedding's lookup on the CPU, the encoder on the GPU: a unit of many kernels there
    gpu_ops = ["matmul", "add", "multiply", "nn.gelu", "nn.layer_norm", "nn.softmax",
               "permute_dims", "reshape", "split"]  # fmt: skip
    rules = dict.fromkeys(gpu_ops, "cuda:0")
    plan = api.placement_from_rules(bert, devices, rules)
    compiled = api.compile(bert, devices, plan)
    libraries = compiled.deployment.libraries
    assert set(libraries) == {0, 1}
    assert CAPTURE not in _text(libraries[0])  # the CPU's units launch nothing to capture
    assert CAPTURE in _text(libraries[1])


def test_cpu_build_never_captures(bert):
    compiled = api.compile(bert, [cpu_device()], options=BuildOptions(cuda_graph=True))
    assert CAPTURE not in _text(compiled.deployment.libraries[0])


def test_cpu_build_with_cuda_graph_on_gives_the_same_numbers(bert):
    inputs = bert.random_inputs()
    on = api.run(api.compile(bert, [cpu_device(0), cpu_device(1)],
                             api.placement_from_rules(bert, [cpu_device(0), cpu_device(1)],
                                                      {"matmul": "cpu:1"})), inputs)  # fmt: skip
    off = api.run(api.compile(bert, [cpu_device()]), inputs)
    for a, b in zip(on, off, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("flag", "graph"), [([], True), (["--no-cuda-graph"], False)])
def test_command_line_flag(flag, graph):
    args = build_parser().parse_args(
        ["compile", "mlp:tiny", "--device", "cuda", "-o", "m.tar", *flag]
    )
    assert build_options(args).cuda_graph is graph
