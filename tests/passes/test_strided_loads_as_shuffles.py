"""StridedLoadsAsShuffles: a CPU kernel's strided vector reads as whole vectors and a shuffle."""

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero.passes import StridedLoadsAsShuffles
from tvm_hetero.passes.strided_loads_as_shuffles import shuffled

EVENS = [0, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21, 23, 25, 27, 29, 31]


@T.prim_func
def _before(a: T.Buffer((64,), "float32"), b: T.Buffer((32,), "float32")):
    T.attr("default", "device_type", 1)
    for i in range(2):
        b[i * 16 : i * 16 + 16] = T.max(a[T.Ramp(i * 32, 2, 16)] * T.Broadcast(T.float32(2), 16),
                                         T.Broadcast(T.float32(0), 16))  # fmt: skip


@T.prim_func
def _expected(a: T.Buffer((64,), "float32"), b: T.Buffer((32,), "float32")):
    T.attr("default", "device_type", 1)
    for i in range(2):
        b[i * 16 : i * 16 + 16] = T.max(
            T.Shuffle([a[T.Ramp(i * 32, 1, 16)], a[T.Ramp(i * 32 + 15, 1, 16)]], EVENS)
            * T.Broadcast(T.float32(2), 16),
            T.Broadcast(T.float32(0), 16),
        )  # fmt: skip


@T.prim_func
def _on_a_gpu(a: T.Buffer((64,), "float32"), b: T.Buffer((32,), "float32")):
    T.attr("default", "device_type", 2)
    for i in range(2):
        b[i * 16 : i * 16 + 16] = a[T.Ramp(i * 32, 2, 16)]


@T.prim_func
def _unit_and_wide_strides(a: T.Buffer((96,), "float32"), b: T.Buffer((32,), "float32")):
    T.attr("default", "device_type", 1)
    b[0:16] = a[T.Ramp(0, 1, 16)]
    b[16:32] = a[T.Ramp(0, 5, 16)]


@T.prim_func
def _in_a_call(a: T.Buffer((64,), "float32"), b: T.Buffer((32,), "float32"), n: T.int32):
    T.attr("default", "device_type", 1)
    for i in range(2):
        b[i * 16 : i * 16 + 16] = T.if_then_else(i < n, a[T.Ramp(i * 32, 2, 16)],
                                                 T.Broadcast(T.float32(0), 16))  # fmt: skip


@T.prim_func
def _in_a_call_expected(a: T.Buffer((64,), "float32"), b: T.Buffer((32,), "float32"), n: T.int32):
    T.attr("default", "device_type", 1)
    for i in range(2):
        b[i * 16 : i * 16 + 16] = T.if_then_else(
            i < n, T.Shuffle([a[T.Ramp(i * 32, 1, 16)], a[T.Ramp(i * 32 + 15, 1, 16)]], EVENS),
            T.Broadcast(T.float32(0), 16),
        )  # fmt: skip


def test_a_strided_read_inside_a_call_is_shuffled_too():
    """A padded read (``if_then_else``, as a convolution's padding copy fused in a task)."""
    tvm.ir.assert_structural_equal(
        shuffled(_in_a_call), _in_a_call_expected.with_attr("global_symbol", "_in_a_call"),
        map_free_vars=True,
    )  # fmt: skip


def test_every_other_element_becomes_two_vectors_and_a_shuffle_within_the_read():
    """The second vector starts at 15, not 16: its last element (30) is the strided read's."""
    after = shuffled(_before)
    tvm.ir.assert_structural_equal(after, _expected.with_attr("global_symbol", "_before"),
                                   map_free_vars=True)  # fmt: skip


def test_gpu_kernels_and_other_strides_stay():
    for func in (_on_a_gpu, _unit_and_wide_strides):
        assert shuffled(func).same_as(func)


@pytest.mark.parametrize(("stride", "lanes"), [(2, 16), (2, 14), (3, 8), (4, 16), (3, 4)])
def test_numbers_are_the_strided_elements(stride, lanes):
    """Built and run: the same elements as numpy's slice, for the strides the pass takes and
    vectors of 4 to 16 lanes, from a buffer that ends at the last element read."""
    size = stride * (lanes - 1) + 1 + 3  # the read starts at 3

    @T.prim_func
    def strided(a: T.Buffer((size,), "float32"), b: T.Buffer((lanes,), "float32")):
        T.func_attr({"global_symbol": "strided"})
        b[0:lanes] = a[T.Ramp(3, stride, lanes)]

    from tvm_hetero.build.multi_device import TIR_PIPELINE

    mod = tvm.IRModule({"strided": strided})
    lib = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}), tir_pipeline=TIR_PIPELINE)
    host = lib.mod.imports[0] if lib.mod.imports else lib.mod
    assert "shufflevector" in host.inspect_source("ll")
    a = np.arange(size, dtype="float32")
    b = tvm.runtime.tensor(np.zeros(lanes, "float32"))
    lib["strided"](tvm.runtime.tensor(a), b)
    np.testing.assert_array_equal(b.numpy(), a[3::stride][:lanes])


def test_the_pass_runs_on_a_module():
    mod = tvm.IRModule({"f": _before})
    after = StridedLoadsAsShuffles()(mod)
    assert "T.Shuffle" in after["f"].script() and "T.Ramp(i * 32, 2, 16)" not in after.script()


def test_a_function_whose_statements_nest_past_pythons_frame_limit_is_walked():
    """Mamba's selective scan, unrolled by its export, lowers to statements 520 deep, and the
    walk recursed past Python's 1,000 frames (``RecursionError`` from a compile): here the
    strided read sits under 600 loops and is still rewritten."""
    from tvm import tirx

    attr = _before.body
    nested = attr.body
    for k in range(600):
        nested = tirx.For(tirx.Var(f"k{k}", "int32"), 0, 1, tirx.ForKind.SERIAL, nested)
    deep = _before.with_body(tirx.AttrStmt(attr.node, attr.attr_key, attr.value, nested))
    inner = StridedLoadsAsShuffles()(tvm.IRModule({"main": deep}))["main"].body.body
    for _ in range(600):
        inner = inner.body
    tvm.ir.assert_structural_equal(inner, _expected.body.body, map_free_vars=True)
