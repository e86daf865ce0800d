"""GuardedLanesAsMaskedStores: a loop over a vector's lanes whose store a condition guards, as
one vector computation and a masked store."""

import numpy as np
import pytest
import tvm
from conftest import fused_body, host_has_avx512
from tvm.script import tirx as T

from tvm_hetero._compat import make_target
from tvm_hetero.build.multi_device import TIR_PIPELINE
from tvm_hetero.devices import cpu_device
from tvm_hetero.passes import guarded_lanes_as_masked_stores
from tvm_hetero.passes.guarded_lanes_as_masked_stores import masked


@T.prim_func
def _write_back(bias: T.Buffer((2,), "float32"), b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    acc = T.alloc_local((16,))
    for x0 in range(4):  # a tile of 4 vectors of 4 written into 14 columns
        for lane in range(4):
            if x0 * 2 + lane // 2 < 7:
                k: T.let[T.int32] = x0 * 4 + lane
                b[x0 * 4 + lane] = T.max(acc[k] + bias[1], T.float32(0))


@T.prim_func
def _write_back_expected(bias: T.Buffer((2,), "float32"), b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    acc = T.alloc_local((16,))
    for x0 in range(4):
        T.masked_store(
            b,
            T.max(
                acc[T.Ramp(x0 * 4, 1, 4)] + T.Broadcast(bias[1], 4), T.Broadcast(T.float32(0), 4)
            ),
            T.Ramp(x0 * 4, 1, 4),
            T.Broadcast(x0 * 2, 4) + T.Ramp(0, 1, 4) // T.Broadcast(2, 4) < T.Broadcast(7, 4),
        )


@T.prim_func
def _bound_around(b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    acc = T.alloc_local((16,))
    for x0 in range(4):  # the index bound before the guard, as TVM's CSE leaves it
        for lane in range(4):
            k: T.let[T.int32] = x0 * 4 + lane
            if k < 14:
                b[k] = acc[k]


@T.prim_func
def _bound_around_expected(b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    acc = T.alloc_local((16,))
    for x0 in range(4):
        T.masked_store(
            b,
            acc[T.Ramp(x0 * 4, 1, 4)],
            T.Ramp(x0 * 4, 1, 4),
            T.Ramp(x0 * 4, 1, 4) < T.Broadcast(14, 4),
        )


@T.prim_func
def _reads_past_the_end(a: T.Buffer((14,), "float32"), b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    for x0 in range(4):  # a global read that a masked-off lane would make out of bounds
        for lane in range(4):
            if x0 * 4 + lane < 14:
                b[x0 * 4 + lane] = a[x0 * 4 + lane] * T.float32(2)


@T.prim_func
def _local_past_the_end(b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    acc = T.alloc_local((14,))
    for x0 in range(4):  # the local buffer as narrow as the output
        for lane in range(4):
            if x0 * 4 + lane < 14:
                b[x0 * 4 + lane] = acc[x0 * 4 + lane]


@T.prim_func
def _extern_call(bias: T.Buffer((2,), "float32"), b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    for x0 in range(4):  # a call that may have effects
        for lane in range(4):
            if x0 * 4 + lane < 14:
                b[x0 * 4 + lane] = T.call_extern("float32", "side_effect", bias[0])


@T.prim_func
def _strided_store(bias: T.Buffer((2,), "float32"), b: T.Buffer((28,), "float32")):
    T.attr("default", "device_type", 1)
    for x0 in range(4):  # every other element: not one vector
        for lane in range(4):
            if x0 * 4 + lane < 14:
                b[x0 * 8 + lane * 2] = bias[0]


@T.prim_func
def _with_else(bias: T.Buffer((2,), "float32"), b: T.Buffer((16,), "float32")):
    T.attr("default", "device_type", 1)
    for x0 in range(4):
        for lane in range(4):
            if x0 * 4 + lane < 14:
                b[x0 * 4 + lane] = bias[0]
            else:
                b[x0 * 4 + lane] = bias[1]


@T.prim_func
def _on_a_gpu(bias: T.Buffer((2,), "float32"), b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 2)
    for x0 in range(4):
        for lane in range(4):
            if x0 * 4 + lane < 14:
                b[x0 * 4 + lane] = bias[0]


@pytest.mark.parametrize(
    ("before", "expected"),
    [(_write_back, _write_back_expected), (_bound_around, _bound_around_expected)],
    ids=["bound under the guard", "bound around it"],
)
def test_a_guarded_write_back_becomes_one_vector_and_a_masked_store(before, expected):
    """The tile's lanes read as one vector (the local buffer within its bounds over every
    lane, the bias the same on every lane), the bindings folded in, the guard a vector of
    lanes, the store masked by it."""
    want = expected.with_attr("global_symbol", before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(masked(before), want, map_free_vars=True)


@T.prim_func
def _read_through_a_let(a: T.Buffer((14,), "float32"), b: T.Buffer((14,), "float32")):
    T.attr("default", "device_type", 1)
    for x0 in range(4):  # the global read's index a let binds to the lane: past the end
        for lane in range(4):
            if x0 * 4 + lane < 14:
                k = T.int32()
                b[x0 * 4 + lane] = T.Let(a[k], where={k: x0 * 4 + lane})


@pytest.mark.parametrize(
    "func",
    [_reads_past_the_end, _local_past_the_end, _extern_call, _strided_store, _with_else,
     _on_a_gpu],
    ids=["global read by lane", "local read past its end", "extern call", "strided store",
         "else branch", "device kernel"],
)  # fmt: skip
def test_loops_whose_masked_off_lanes_could_fault_or_differ_stay(func):
    assert masked(func) is func


def test_a_read_whose_let_bound_index_follows_the_lane_stays():
    assert masked(_read_through_a_let) is _read_through_a_let


def test_switched_off_it_leaves_the_module(monkeypatch):
    monkeypatch.setattr(guarded_lanes_as_masked_stores, "MASKED_STORES", False)
    mod = tvm.IRModule({"main": _write_back})
    assert guarded_lanes_as_masked_stores.GuardedLanesAsMaskedStores()(mod).same_as(mod)


@pytest.mark.parametrize("width", [56, 50, 17])
def test_built_write_backs_equal_numpy_and_store_whole_masked_vectors(width):
    """A tile of 4 vectors of 16 (8 of 8 for AVX2) with a bias and a sigmoid written back
    into ``width`` columns, built by the build's TIR pipeline for this CPU's vector width:
    numpy's numbers in the columns kept, the rest untouched; LLVM stores masked vectors
    and gathers nothing."""
    lanes = 16 if host_has_avx512() else 8
    vectors = 64 // lanes

    @T.prim_func
    def kernel(a: T.Buffer((64,), "float32"), bias: T.Buffer((2,), "float32"),
               b: T.Buffer((64,), "float32")):  # fmt: skip
        acc = T.alloc_local((64,))
        for i in T.vectorized(64):
            acc[i] = a[i]
        for x0 in range(vectors):
            for lane in range(lanes):
                if x0 * lanes + lane < width:
                    b[x0 * lanes + lane] = (acc[x0 * lanes + lane] + bias[1]) / (
                        T.float32(1) + T.exp(T.float32(0) - acc[x0 * lanes + lane] - bias[1])
                    )

    func = kernel.with_attr("global_symbol", "main")
    target = make_target({"kind": "llvm", "mcpu": "skylake-avx512" if lanes == 16 else "haswell"})
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=TIR_PIPELINE)
    ll = lib.mod.inspect_source("ll") if hasattr(lib, "mod") else lib.inspect_source("ll")
    assert "llvm.masked.store" in ll and "masked.gather" not in ll
    rng = np.random.default_rng(0)
    a, bias = rng.standard_normal(64).astype("float32"), np.array([0.0, 0.5], "float32")
    b = tvm.runtime.tensor(np.full(64, 7.0, "float32"))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(bias), b)
    x = (a + bias[1]).astype("float64")
    want = np.where(np.arange(64) < width, x / (1 + np.exp(-x)), 7.0)
    np.testing.assert_allclose(b.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("on", [True, False])
def test_a_cropped_depthwise_convolution_with_silu_stores_masked_vectors_and_matches(
    on, monkeypatch
):
    """A depthwise 3x3 convolution of 8 channels computed 16 wide and cropped to 14, with
    a bias and a SiLU, scheduled by the CPU rules for AVX2 and built by the build's TIR
    pipeline: its cropped vector stored under a mask, the numbers those of the module
    unscheduled, the pass on or off."""
    from tvm import relax

    from tvm_hetero.schedules import schedule_kernels

    monkeypatch.setattr(guarded_lanes_as_masked_stores, "MASKED_STORES", on)
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((8, 1, 3, 3)).astype("float32")
    bias = rng.standard_normal((1, 8, 1, 1)).astype("float32")

    def body(bb, x):
        out = relax.op.nn.conv2d(x, relax.const(weights), padding=(1, 1, 1, 3), groups=8)
        out = relax.op.strided_slice(out, axes=[3], begin=[0], end=[14])
        out = relax.op.add(out, relax.const(bias))
        return relax.op.multiply(out, relax.op.sigmoid(out))

    target = make_target({**cpu_device().target, "mcpu": "znver3", "num-cores": 2})
    mod = fused_body([(1, 8, 14, 14)], body, target)
    scheduled = schedule_kernels(mod, "rules")
    lib = tvm.compile(scheduled, target, tir_pipeline=TIR_PIPELINE)
    ll = "\n".join(m.inspect_source("ll") for m in lib.mod.imports if m.kind == "llvm")
    assert ("llvm.masked.store.v8f32" in ll) == on
    x = rng.standard_normal((1, 8, 14, 14)).astype("float32")
    got = relax.VirtualMachine(lib, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    plain = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    want = plain["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_pure_calls_are_tvm_operators():
    """Each name the pass lets a guarded value call names an operator TVM registers (a name
    that does not would never match, and its calls would stay serial)."""
    for name in guarded_lanes_as_masked_stores.PURE_CALLS:
        assert tvm.ir.Op.get(name).name == name
