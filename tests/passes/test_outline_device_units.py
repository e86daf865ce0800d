import numpy as np
import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero.build.multi_device import build
from tvm_hetero.ir.attrs import UNIT_DEVICE_ATTR
from tvm_hetero.passes import OutlineDeviceUnits
from tvm_hetero.runtime.vm import make_vm, run


@I.ir_module
class Before:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 8), "float32", "llvm:0")) -> R.Tensor((4, 8), "float32", "llvm:0"):
        with R.dataflow():
            a = R.nn.relu(x)
            a1 = R.to_vdevice(a, "llvm:1")
            b = R.exp(a1)
            c = R.sigmoid(a)
            b0 = R.to_vdevice(b, "llvm:0")
            d = R.add(c, b0)
            R.output(d)
        return d


@I.ir_module
class Expected:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def unit0_d0(x: R.Tensor((4, 8), "float32", "llvm:0")) -> R.Tensor((4, 8), "float32", "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            a = R.nn.relu(x)
            R.output(a)
        return a

    @R.function
    def unit1_d1(a1: R.Tensor((4, 8), "float32", "llvm:1")) -> R.Tensor(
        (4, 8), "float32", "llvm:1"
    ):
        R.func_attr({"tvm_hetero.unit_device": 1})
        with R.dataflow():
            b = R.exp(a1)
            R.output(b)
        return b

    @R.function
    def unit2_d0(a: R.Tensor((4, 8), "float32", "llvm:0")) -> R.Tensor((4, 8), "float32", "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            c = R.sigmoid(a)
            R.output(c)
        return c

    @R.function
    def unit3_d0(
        c: R.Tensor((4, 8), "float32", "llvm:0"), b0: R.Tensor((4, 8), "float32", "llvm:0")
    ) -> R.Tensor((4, 8), "float32", "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            d = R.add(c, b0)
            R.output(d)
        return d

    @R.function
    def main(x: R.Tensor((4, 8), "float32", "llvm:0")) -> R.Tensor((4, 8), "float32", "llvm:0"):
        cls = Expected
        with R.dataflow():
            a = cls.unit0_d0(x)
            a1 = R.to_vdevice(a, "llvm:1")
            b = cls.unit1_d1(a1)
            c = cls.unit2_d0(a)
            b0 = R.to_vdevice(b, "llvm:0")
            d = cls.unit3_d0(c, b0)
            R.output(d)
        return d


def test_branches_become_units_cut_where_tensors_cross():
    after = OutlineDeviceUnits()(Before)
    tvm.ir.assert_structural_equal(after, Expected)


def test_units_compute_what_main_computed():
    x = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    devs = [tvm.cpu(0), tvm.cpu(1)]
    ref = run(make_vm(build(Before), devs), [x], devs[0])
    got = run(make_vm(build(OutlineDeviceUnits()(Before)), devs), [x], devs[0])
    np.testing.assert_array_equal(ref[0], got[0])


VD3 = [I.vdevice("llvm", 0), I.vdevice("llvm", 1), I.vdevice("llvm", 2)]
F32 = "float32"


@I.ir_module
class Scatter:
    I.module_global_infos({"vdevice": VD3})

    @R.function
    def main(x: R.Tensor((6, 8), F32, "llvm:0")) -> R.Tensor((6, 8), F32, "llvm:0"):
        with R.dataflow():
            a = R.strided_slice(x, [0], [0], [2])
            b = R.strided_slice(x, [0], [2], [4])
            b1 = R.to_vdevice(b, "llvm:1")
            c = R.strided_slice(x, [0], [4], [6])
            c2 = R.to_vdevice(c, "llvm:2")
            ya = R.nn.relu(a)
            yb = R.nn.relu(b1)
            yc = R.nn.relu(c2)
            yb0 = R.to_vdevice(yb, "llvm:0")
            yc0 = R.to_vdevice(yc, "llvm:0")
            y = R.concat([ya, yb0, yc0], axis=0)
            R.output(y)
        return y


T28 = R.Tensor((2, 8), F32, "llvm:0")


@I.ir_module
class ScatterUnits:
    I.module_global_infos({"vdevice": VD3})

    @R.function
    def unit0_d0(x: R.Tensor((6, 8), F32, "llvm:0")) -> R.Tuple(T28, T28, T28):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            a = R.strided_slice(x, [0], [0], [2])
            b = R.strided_slice(x, [0], [2], [4])
            c = R.strided_slice(x, [0], [4], [6])
            gv = (a, b, c)
            R.output(a, b, c, gv)
        return gv

    @R.function
    def unit1_d0(a: T28) -> T28:
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            ya = R.nn.relu(a)
            R.output(ya)
        return ya

    @R.function
    def unit2_d1(b1: R.Tensor((2, 8), F32, "llvm:1")) -> R.Tensor((2, 8), F32, "llvm:1"):
        R.func_attr({"tvm_hetero.unit_device": 1})
        with R.dataflow():
            yb = R.nn.relu(b1)
            R.output(yb)
        return yb

    @R.function
    def unit3_d2(c2: R.Tensor((2, 8), F32, "llvm:2")) -> R.Tensor((2, 8), F32, "llvm:2"):
        R.func_attr({"tvm_hetero.unit_device": 2})
        with R.dataflow():
            yc = R.nn.relu(c2)
            R.output(yc)
        return yc

    @R.function
    def unit4_d0(ya: T28, yb0: T28, yc0: T28) -> R.Tensor((6, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            y = R.concat((ya, yb0, yc0), axis=0)
            R.output(y)
        return y

    @R.function
    def main(x: R.Tensor((6, 8), F32, "llvm:0")) -> R.Tensor((6, 8), F32, "llvm:0"):
        cls = ScatterUnits
        with R.dataflow():
            unit0_d0_out = cls.unit0_d0(x)
            a = unit0_d0_out[0]
            b = unit0_d0_out[1]
            c = unit0_d0_out[2]
            b1 = R.to_vdevice(b, "llvm:1")
            c2 = R.to_vdevice(c, "llvm:2")
            ya = cls.unit1_d0(a)
            yb = cls.unit2_d1(b1)
            yc = cls.unit3_d2(c2)
            yb0 = R.to_vdevice(yb, "llvm:0")
            yc0 = R.to_vdevice(yc, "llvm:0")
            y = cls.unit4_d0(ya, yb0, yc0)
            R.output(y)
        return y


def test_slices_sent_one_after_another_leave_one_unit():
    """The pieces of an input scattered to every device: one unit (one call to the worker),
    not a unit per piece; the relu after the sends still starts a unit of its own."""
    after = OutlineDeviceUnits()(Scatter)
    tvm.ir.assert_structural_equal(after, ScatterUnits)
    x = np.random.default_rng(1).standard_normal((6, 8)).astype("float32")
    devs = [tvm.cpu(0), tvm.cpu(1), tvm.cpu(2)]
    ref = run(make_vm(build(Scatter), devs), [x], devs[0])
    got = run(make_vm(build(after), devs), [x], devs[0])
    np.testing.assert_array_equal(ref[0], got[0])


def test_weights_stay_inside_the_unit_that_reads_them():
    w = np.ones((8, 8), "float32")

    @I.ir_module
    class Weighted:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(x: R.Tensor((4, 8), "float32", "llvm:0")):
            with R.dataflow():
                x1 = R.to_vdevice(x, "llvm:1")
                w1 = R.to_vdevice(R.const(w), "llvm:1")
                y = R.matmul(x1, w1)
                y0 = R.to_vdevice(y, "llvm:0")
                R.output(y0)
            return y0

    after = OutlineDeviceUnits()(Weighted)
    main_copies = [b for b in after["main"].body.blocks[0].bindings if "to_vdevice" in str(b.value)]
    assert len(main_copies) == 2  # the input in, the result out; the weight never crosses
    units = [
        gv.name_hint for gv, f in after.functions_items() if f.attrs and UNIT_DEVICE_ATTR in f.attrs
    ]
    assert units == ["unit0_d1"]


def test_a_module_without_vdevices_is_refused():
    @I.ir_module
    class Plain:
        @R.function
        def main(x: R.Tensor((4,), "float32")):
            return x

    with pytest.raises(ValueError, match="OutlineDeviceUnits: the module declares no vdevices"):
        OutlineDeviceUnits()(Plain)


@I.ir_module
class GridJoin:
    """Device 1 sends a halo, keeps a crop of its tile, then joins pieces from device 0 in
    two steps (a piece read between them), and computes on the join."""

    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        with R.dataflow():
            x1 = R.to_vdevice(x, "llvm:1")
            t = R.nn.relu(x1)
            h = R.strided_slice(t, axes=[0], begin=[0], end=[1])
            h0 = R.to_vdevice(h, "llvm:0")
            u = R.add(x, h0)
            a = R.strided_slice(u, axes=[0], begin=[0], end=[2])
            a1 = R.to_vdevice(a, "llvm:1")
            b = R.strided_slice(u, axes=[0], begin=[2], end=[4])
            b1 = R.to_vdevice(b, "llvm:1")
            own = R.strided_slice(t, axes=[1], begin=[0], end=[4])
            ja = R.concat((a1, b1), axis=0)
            c = R.strided_slice(u, axes=[1], begin=[4], end=[8])
            c1 = R.to_vdevice(c, "llvm:1")
            jb = R.concat((ja, c1), axis=1)
            j = R.concat((jb, own), axis=1)
            y = R.exp(j)
            y0 = R.to_vdevice(y, "llvm:0")
            R.output(y0)
        return y0


@I.ir_module
class GridJoinUnits:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def unit0_d1(x1: R.Tensor((4, 8), F32, "llvm:1")) -> R.Tuple(
        R.Tensor((4, 8), F32, "llvm:1"), R.Tensor((1, 8), F32, "llvm:1")
    ):
        R.func_attr({"tvm_hetero.unit_device": 1})
        with R.dataflow():
            t = R.nn.relu(x1)
            h = R.strided_slice(t, axes=[0], begin=[0], end=[1])
            gv = (t, h)
            R.output(t, h, gv)
        return gv

    @R.function
    def unit1_d0(
        x: R.Tensor((4, 8), F32, "llvm:0"), h0: R.Tensor((1, 8), F32, "llvm:0")
    ) -> R.Tuple(
        R.Tensor((2, 8), F32, "llvm:0"), R.Tensor((2, 8), F32, "llvm:0"),
        R.Tensor((4, 4), F32, "llvm:0"),
    ):  # fmt: skip
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            u = R.add(x, h0)
            a = R.strided_slice(u, axes=[0], begin=[0], end=[2])
            b = R.strided_slice(u, axes=[0], begin=[2], end=[4])
            c = R.strided_slice(u, axes=[1], begin=[4], end=[8])
            gv = (a, b, c)
            R.output(a, b, c, gv)
        return gv

    @R.function
    def unit2_d1(
        t: R.Tensor((4, 8), F32, "llvm:1"), a1: R.Tensor((2, 8), F32, "llvm:1"),
        b1: R.Tensor((2, 8), F32, "llvm:1"), c1: R.Tensor((4, 4), F32, "llvm:1"),
    ) -> R.Tensor((4, 16), F32, "llvm:1"):  # fmt: skip
        R.func_attr({"tvm_hetero.unit_device": 1})
        with R.dataflow():
            own = R.strided_slice(t, axes=[1], begin=[0], end=[4])
            ja = R.concat((a1, b1), axis=0)
            jb = R.concat((ja, c1), axis=1)
            j = R.concat((jb, own), axis=1)
            y = R.exp(j)
            R.output(y)
        return y

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 16), F32, "llvm:0"):
        cls = GridJoinUnits
        with R.dataflow():
            x1 = R.to_vdevice(x, "llvm:1")
            unit0_d1_out = cls.unit0_d1(x1)
            t = unit0_d1_out[0]
            h = unit0_d1_out[1]
            h0 = R.to_vdevice(h, "llvm:0")
            unit1_d0_out = cls.unit1_d0(x, h0)
            a = unit1_d0_out[0]
            b = unit1_d0_out[1]
            c = unit1_d0_out[2]
            a1 = R.to_vdevice(a, "llvm:1")
            b1 = R.to_vdevice(b, "llvm:1")
            c1 = R.to_vdevice(c, "llvm:1")
            y = cls.unit2_d1(t, a1, b1, c1)
            y0 = R.to_vdevice(y, "llvm:0")
            R.output(y0)
        return y0


def test_a_boundarys_joins_wait_for_all_their_pieces_in_one_unit():
    """The crop of its own tile, the joins and the compute after them are one unit on device 1
    (were three: the crop after the send, the first join, then a unit from the piece read
    between the joins); a receive after compute still cuts (device 0's ``u`` after ``x``)."""
    after = OutlineDeviceUnits()(GridJoin)
    x = np.random.default_rng(2).standard_normal((4, 8)).astype("float32")
    devs = [tvm.cpu(0), tvm.cpu(1)]
    ref = run(make_vm(build(GridJoin), devs), [x], devs[0])
    got = run(make_vm(build(after), devs), [x], devs[0])
    np.testing.assert_array_equal(ref[0], got[0])
    tvm.ir.assert_structural_equal(after, GridJoinUnits)
