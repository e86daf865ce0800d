import pytest
import tvm
import tvm.testing
from tvm.relax.ir.instrument import WellFormedInstrument

from tvm_hetero.devices import cpu_device


@pytest.fixture(autouse=True)
def _well_formed_before_and_after_every_pass():
    with tvm.transform.PassContext(instruments=[WellFormedInstrument()]):
        yield


@pytest.fixture(scope="session")
def two_cpus():
    """Two CPU vdevices (llvm:0, llvm:1): the numerical test bed on GPU-less machines."""
    return [cpu_device(0), cpu_device(1)]


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    if not tvm.testing.env.has_gpu():
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)
