"""OutlineSubgraphUnits: one unit per planned subgraph, structurally and numerically."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_hetero._compat import TensorType
from tvm_hetero.build.multi_device import BuildOptions, build
from tvm_hetero.passes import OutlineDeviceUnits, OutlineSubgraphUnits
from tvm_hetero.runtime.vm import make_vm, run

F32 = "float32"


@I.ir_module
class Before:
    """A fork on one device: ``b`` and ``c`` are two branches, both on llvm:0."""

    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.exp(a)
            c = R.sigmoid(a)
            d = R.add(b, c)
            R.output(d)
        return d


@I.ir_module
class Expected:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def unit0_d0(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            a = R.nn.relu(x)
            R.output(a)
        return a

    @R.function
    def unit1_d0(a: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            b = R.exp(a)
            R.output(b)
        return b

    @R.function
    def unit2_d0(a: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            c = R.sigmoid(a)
            R.output(c)
        return c

    @R.function
    def unit3_d0(
        b: R.Tensor((4, 8), F32, "llvm:0"), c: R.Tensor((4, 8), F32, "llvm:0")
    ) -> R.Tensor((4, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            d = R.add(b, c)
            R.output(d)
        return d

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        cls = Expected
        with R.dataflow():
            a = cls.unit0_d0(x)
            b = cls.unit1_d0(a)
            c = cls.unit2_d0(a)
            d = cls.unit3_d0(b, c)
            R.output(d)
        return d


SUBGRAPHS = [["a"], ["b"], ["c"], ["d"]]


def test_each_subgraph_is_a_unit_even_two_on_one_device():
    tvm.ir.assert_structural_equal(OutlineSubgraphUnits(SUBGRAPHS)(Before), Expected)
    # the device-run pass would make one unit of it all: the branches could not start apart
    device_units = OutlineDeviceUnits()(Before)
    assert [gv.name_hint for gv, _ in device_units.functions_items() if "unit" in gv.name_hint] == [
        "unit0_d0"
    ]


@I.ir_module
class Crossing:
    """Branch ``b`` on llvm:1, interleaved in program order with branch ``c`` on llvm:0."""

    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        with R.dataflow():
            a = R.nn.relu(x)
            a1 = R.to_vdevice(a, "llvm:1")
            b = R.exp(a1)
            c = R.sigmoid(a)
            b2 = R.multiply(b, b)
            c2 = R.tanh(c)
            b0 = R.to_vdevice(b2, "llvm:0")
            d = R.add(b0, c2)
            R.output(d)
        return d


def test_units_compute_what_main_computed_and_interleaved_branches_stay_whole():
    subgraphs = [["a"], ["b", "b2"], ["c", "c2"], ["d"]]
    after = OutlineSubgraphUnits(subgraphs)(Crossing)
    units = sorted(gv.name_hint for gv, _ in after.functions_items() if "unit" in gv.name_hint)
    assert units == ["unit0_d0", "unit1_d1", "unit2_d0", "unit3_d0"]
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(F32)
    devs = [tvm.cpu(0), tvm.cpu(1)]
    ref = run(make_vm(build(Crossing), devs), [x], devs[0])
    got = run(make_vm(build(after), devs), [x], devs[0])
    np.testing.assert_array_equal(ref[0], got[0])


def test_operators_left_out_join_what_they_read():
    after = OutlineSubgraphUnits([["a"], ["b"]])(Before)  # c and d in no subgraph
    units = sorted(gv.name_hint for gv, _ in after.functions_items() if "unit" in gv.name_hint)
    assert units == ["unit0_d0", "unit1_d0"]  # c joins a's unit, d joins b's


def test_bad_subgraphs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="in subgraphs 0 and 1"):
        OutlineSubgraphUnits([["a"], ["a", "b"]])
    with pytest.raises(ValueError, match="unknown operator id"):
        OutlineSubgraphUnits([["nope"]])(Before)
    with pytest.raises(ValueError, match="on vdevices 0 and 1"):
        OutlineSubgraphUnits([["a", "b"]])(Crossing)
    with pytest.raises(ValueError, match="read each other's results"):
        OutlineSubgraphUnits([["a", "d"], ["b"], ["c"]])(Before)


@I.ir_module
class WithKernels:
    """Two identical kernels called before legalization (as ONNX's Clip emits ``maximum`` and
    ``maximum1``), in different subgraphs."""

    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @T.prim_func(private=True, s_tir=True)
    def maximum(x: T.Buffer((4, 8), F32), y: T.Buffer((4, 8), F32)):
        for i, j in T.grid(4, 8):
            with T.sblock("y"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = T.max(x[vi, vj], T.float32(0))

    @T.prim_func(private=True, s_tir=True)
    def maximum1(x: T.Buffer((4, 8), F32), y: T.Buffer((4, 8), F32)):
        for i, j in T.grid(4, 8):
            with T.sblock("y"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = T.max(x[vi, vj], T.float32(0))

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        cls = WithKernels
        with R.dataflow():
            a = R.call_tir(cls.maximum, (x,), out_ty=R.Tensor((4, 8), F32, "llvm:0"))
            b = R.exp(a)
            c = R.call_tir(cls.maximum1, (b,), out_ty=R.Tensor((4, 8), F32, "llvm:0"))
            R.output(c)
        return c


def test_units_call_kernels_by_the_modules_own_names():
    after = OutlineSubgraphUnits([["a"], ["b"], ["c"]])(WithKernels)
    defined = [gv for gv, _ in after.functions_items()]
    called = []
    for gv, func in after.functions_items():
        if "unit" in gv.name_hint:
            relax.analysis.post_order_visit(
                func.body,
                lambda e: (
                    called.append(e.args[0])
                    if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir"
                    else None
                ),
            )
    assert len(called) == 2 and all(any(g.same_as(d) for d in defined) for g in called)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(F32)
    devs = [tvm.cpu(0), tvm.cpu(1)]
    unfused = BuildOptions(fuse=False)  # TVM's FuseTIR refuses these two kernels side by side
    ref = run(make_vm(build(WithKernels, unfused), devs), [x], devs[0])
    got = run(make_vm(build(after), devs), [x], devs[0])
    np.testing.assert_array_equal(ref[0], got[0])
    np.testing.assert_allclose(got[0], np.exp(np.maximum(x, 0)), rtol=1e-6)


@I.ir_module
class Gathered:
    """Two branches' results gathered in a tuple that ``main`` then returns item by item (as
    the output copies home leave a model that returns a tuple): ``t`` takes its first field's
    device, llvm:0, and its item ``u`` lives on llvm:1."""

    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((4, 8), F32, "llvm:0")):
        with R.dataflow():
            a = R.nn.relu(x)
            a1 = R.to_vdevice(a, "llvm:1")
            b = R.exp(a1)
            c = R.sigmoid(a)
            t = (c, b)
            u = t[1]
            v = t[0]
            R.output(u, v)
        return (v, u)


@I.ir_module
class GatheredUnits:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def unit0_d0(x: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            a = R.nn.relu(x)
            R.output(a)
        return a

    @R.function
    def unit1_d1(a1: R.Tensor((4, 8), F32, "llvm:1")) -> R.Tensor((4, 8), F32, "llvm:1"):
        R.func_attr({"tvm_hetero.unit_device": 1})
        with R.dataflow():
            b = R.exp(a1)
            u = b
            R.output(u)
        return u

    @R.function
    def unit2_d0(a: R.Tensor((4, 8), F32, "llvm:0")) -> R.Tensor((4, 8), F32, "llvm:0"):
        R.func_attr({"tvm_hetero.unit_device": 0})
        with R.dataflow():
            c = R.sigmoid(a)
            v = c
            R.output(v)
        return v

    @R.function
    def main(
        x: R.Tensor((4, 8), F32, "llvm:0"),
    ) -> R.Tuple(R.Tensor((4, 8), F32, "llvm:0"), R.Tensor((4, 8), F32, "llvm:1")):
        cls = GatheredUnits
        with R.dataflow():
            a = cls.unit0_d0(x)
            a1 = R.to_vdevice(a, "llvm:1")
            u = cls.unit1_d1(a1)
            v = cls.unit2_d0(a)
            gv = (v, u)
            R.output(u, v, gv)
        return gv


def _tuple_params(mod: tvm.IRModule) -> list[str]:
    return [
        f"{gv.name_hint}({p.name})"
        for gv, func in mod.functions_items()
        if "unit" in gv.name_hint
        for p in func.params
        if not isinstance(p.ty, TensorType)
    ]


def test_items_of_a_tuple_gathered_from_two_devices_are_read_as_its_fields():
    # before, u was a unit of its own on llvm:1 taking the whole tuple from llvm:0: a remote
    # worker cannot send a tuple, and DUET's plan for MT-DNN failed on workers that way
    after = OutlineSubgraphUnits([["a"], ["b"], ["c"]])(Gathered)
    tvm.ir.assert_structural_equal(after, GatheredUnits)
    by_runs = OutlineDeviceUnits()(Gathered)
    assert not _tuple_params(after) and not _tuple_params(by_runs)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(F32)
    devs = [tvm.cpu(0), tvm.cpu(1)]
    ref = run(make_vm(build(Gathered), devs), [x], devs[0])
    for mod in (after, by_runs):
        got = run(make_vm(build(mod), devs), [x], devs[0])
        for r, g in zip(ref, got, strict=True):
            np.testing.assert_array_equal(r, g)
