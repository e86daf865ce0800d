import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero._compat import make_target
from tvm_hetero.passes import DeclareVDevices


@I.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((2,), "float32")):
        return x


def _vdev(kind, index):
    return relax.VDevice(make_target(kind), index, "global")


def test_declares_the_list():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(x: R.Tensor((2,), "float32")):
            return x

    after = DeclareVDevices([_vdev("llvm", 0), _vdev("llvm", 1)])(Before)
    tvm.ir.assert_structural_equal(after, Expected)
    assert "vdevice" not in Before.global_infos  # input not mutated
    again = DeclareVDevices([_vdev("llvm", 0), _vdev("llvm", 1)])(after)
    tvm.ir.assert_structural_equal(again, Expected)  # idempotent


def test_errors():
    with pytest.raises(ValueError, match="DeclareVDevices: vdevices must list at least one"):
        DeclareVDevices([])
    with pytest.raises(
        ValueError, match=r"DeclareVDevices: vdevice\(s\) \['llvm:0'\] declared twice"
    ):
        DeclareVDevices([_vdev("llvm", 0), _vdev("llvm", 0)])
    declared = DeclareVDevices([_vdev("llvm", 0)])(Before)
    with pytest.raises(ValueError, match="already declares vdevices"):
        DeclareVDevices([_vdev("llvm", 0), _vdev("llvm", 1)])(declared)
