"""CPU serial (Lee et al.'s CPU_S) and CPU parallel as two real vdevices of one CPU."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_hetero import api
from tvm_hetero.build.multi_device import lower
from tvm_hetero.devices.discover import resolve_device
from tvm_hetero.ir.attrs import CALL_TIR_OP, ENTRY_FUNC
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.plan import Placement
from tvm_hetero.zoo import load_zoo_model


@pytest.fixture(scope="module")
def serial_parallel():
    return [resolve_device("cpu"), resolve_device("cpu-serial")]


def test_serial_cpu_is_a_one_core_vdevice(serial_parallel):
    par, ser = serial_parallel
    assert ser.name == "cpu-serial" and ser.index == 1 and ser.target["num-cores"] == 1
    assert par.target["num-cores"] == par.threads and par.index == 0


@pytest.mark.parametrize("name", ["bert-small:tiny", "resnet18:tiny"])
def test_every_kernel_is_built_for_the_device_it_runs_on(name, serial_parallel):
    """Alternate operators between the two CPUs: each call's kernel carries its vdevice's
    target (serial kernels have no parallel loop) and the numbers match one device."""
    model = load_zoo_model(name)
    nodes = OpGraph.from_module(model.mod).nodes
    placement = Placement(("cpu", "cpu-serial"), {n.node_id: i % 2 for i, n in enumerate(nodes)})
    placed = api.place(model, serial_parallel, placement)
    lowered = lower(placed)
    cores_seen = set()
    for block in lowered[ENTRY_FUNC].body.blocks:
        for binding in block.bindings:
            call = binding.value
            if not (isinstance(call, relax.Call) and call.op == tvm.ir.Op.get(CALL_TIR_OP)):
                continue
            kernel = lowered[call.args[0]]
            vdev = binding.var.ty.vdevice if hasattr(binding.var.ty, "vdevice") else None
            if vdev is None:
                continue
            cores = int(kernel.attrs["target"].attrs["num-cores"])
            assert cores == int(vdev.target.attrs["num-cores"]), call.args[0].name_hint
            assert cores > 1 or "T.parallel" not in kernel.script()
            cores_seen.add(cores)
    assert cores_seen == {1, serial_parallel[0].threads} or serial_parallel[0].threads == 1
    inputs = model.random_inputs()
    got = api.run(api.compile(model, serial_parallel, placement), inputs)
    want = api.reference_outputs(model, inputs, serial_parallel[0])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_median_seconds_times_a_two_device_model(serial_parallel):
    from tvm_hetero.runtime.measure import MeasureConfig

    model = load_zoo_model("mlp:tiny")
    compiled = api.compile(model, serial_parallel, Placement(("cpu", "cpu-serial"), {}))
    seconds = api.median_seconds(
        compiled, model.random_inputs(), MeasureConfig(repeat=3, min_repeat_ms=1)
    )
    assert 0 < seconds < 1
