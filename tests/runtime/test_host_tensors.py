"""Arrays made into host tensors (runtime/memory.py ``tensor_on``): the executor's inputs."""

import numpy as np
import pytest
import tvm

from tvm_hetero.runtime.memory import ALIGN, array_of, tensor_on


@pytest.mark.parametrize(
    "array",
    [
        np.arange(8, dtype="float32"),
        np.arange(24, dtype="int64").reshape(2, 3, 4)[:, ::2],  # not contiguous
        np.array([True, False, True]),
        np.arange(5, dtype="float16"),
        np.zeros((0, 3), "float32"),
        np.array(7, "int32"),  # no dimensions
    ],
    ids=["float32", "strided int64", "bool", "float16", "empty", "scalar"],
)
def test_a_host_tensor_is_an_aligned_copy_of_its_array(array):
    tensor = tensor_on(array, tvm.cpu())
    assert isinstance(tensor, tvm.runtime.Tensor) and tensor.device == tvm.cpu()
    assert tuple(tensor.shape) == array.shape and str(tensor.dtype) == str(array.dtype)
    np.testing.assert_array_equal(tensor.numpy(), array)
    back = array_of(tensor)
    assert back.dtype == array.dtype and back.shape == array.shape and back.flags.owndata
    np.testing.assert_array_equal(back, array)
    if array.size:
        assert np.from_dlpack(tensor).ctypes.data % ALIGN == 0
        before = array.copy()
        array[...] = 0 if array.dtype != bool else False  # the tensor is a copy
        np.testing.assert_array_equal(tensor.numpy(), before)
        np.from_dlpack(tensor)[...] = 1  # and so is what came back from it
        np.testing.assert_array_equal(back, before)


def test_a_host_tensor_runs_a_compiled_function():
    from tvm_hetero import api
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.frontends import load_model
    from tvm_hetero.ir.workloads import chain_module
    from tvm_hetero.runtime.executor import Executor

    model = load_model(chain_module(3), name="chain")
    with Executor(api.compile(model, [resolve_device("cpu")]).deployment) as ex:
        (x,) = ex.place_inputs({"x": np.arange(8, dtype="float32")})
        assert np.from_dlpack(x).ctypes.data % ALIGN == 0
        np.testing.assert_allclose(ex.outputs_of(ex.run_tensors([x]))[0], np.arange(8) + 3)
