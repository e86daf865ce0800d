"""BlockedCopiesAsTransposes: copies between planar and blocked-channel layouts by transposes."""

import numpy as np
import pytest
import tvm
from conftest import host_has_avx512
from tvm.script import tirx as T

from tvm_hetero._compat import make_target
from tvm_hetero.build.multi_device import TIR_PIPELINE
from tvm_hetero.passes import blocked_copies_as_transposes
from tvm_hetero.passes.blocked_copies_as_transposes import transposed


@T.prim_func
def _gather(a: T.Buffer((24,), "float32"), b: T.Buffer((24,), "float32")):
    T.attr("default", "device_type", 1)
    for p in range(6):  # 4 channels of 6 positions -> 6 positions of 4 channels
        b[p * 4 : p * 4 + 4] = a[T.Ramp(p, 6, 4)]


UPPER_2, LOWER_2 = [0, 1, 4, 5], [2, 3, 6, 7]
UPPER_1, LOWER_1 = [0, 4, 2, 6], [1, 5, 3, 7]


@T.prim_func
def _gather_expected(a: T.Buffer((24,), "float32"), b: T.Buffer((24,), "float32")):
    T.attr("default", "device_type", 1)
    for q in range(1):
        t0: T.let[T.float32x4] = a[T.Ramp(q * 4, 1, 4)]
        t1: T.let[T.float32x4] = a[T.Ramp(q * 4 + 6, 1, 4)]
        t2: T.let[T.float32x4] = a[T.Ramp(q * 4 + 12, 1, 4)]
        t3: T.let[T.float32x4] = a[T.Ramp(q * 4 + 18, 1, 4)]
        s0: T.let[T.float32x4] = T.Shuffle([t0, t2], UPPER_2)
        s2: T.let[T.float32x4] = T.Shuffle([t0, t2], LOWER_2)
        s1: T.let[T.float32x4] = T.Shuffle([t1, t3], UPPER_2)
        s3: T.let[T.float32x4] = T.Shuffle([t1, t3], LOWER_2)
        u0: T.let[T.float32x4] = T.Shuffle([s0, s1], UPPER_1)
        u1: T.let[T.float32x4] = T.Shuffle([s0, s1], LOWER_1)
        u2: T.let[T.float32x4] = T.Shuffle([s2, s3], UPPER_1)
        u3: T.let[T.float32x4] = T.Shuffle([s2, s3], LOWER_1)
        b[q * 16 : q * 16 + 4] = u0
        b[q * 16 + 4 : q * 16 + 8] = u1
        b[q * 16 + 8 : q * 16 + 12] = u2
        b[q * 16 + 12 : q * 16 + 16] = u3
    for p in range(4, 6):  # the last positions as before
        b[p * 4 : p * 4 + 4] = a[T.Ramp(p, 6, 4)]


@T.prim_func
def _scatter(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
    T.attr("default", "device_type", 1)
    for p in range(4):  # 4 positions of 4 channels -> 4 channels of 4 positions
        b[T.Ramp(p, 4, 4)] = a[T.Ramp(p * 4, 1, 4)]


@T.prim_func
def _scatter_expected(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
    T.attr("default", "device_type", 1)
    for q in range(1):
        t0: T.let[T.float32x4] = a[T.Ramp(q * 16, 1, 4)]
        t1: T.let[T.float32x4] = a[T.Ramp(q * 16 + 4, 1, 4)]
        t2: T.let[T.float32x4] = a[T.Ramp(q * 16 + 8, 1, 4)]
        t3: T.let[T.float32x4] = a[T.Ramp(q * 16 + 12, 1, 4)]
        s0: T.let[T.float32x4] = T.Shuffle([t0, t2], UPPER_2)
        s2: T.let[T.float32x4] = T.Shuffle([t0, t2], LOWER_2)
        s1: T.let[T.float32x4] = T.Shuffle([t1, t3], UPPER_2)
        s3: T.let[T.float32x4] = T.Shuffle([t1, t3], LOWER_2)
        u0: T.let[T.float32x4] = T.Shuffle([s0, s1], UPPER_1)
        u1: T.let[T.float32x4] = T.Shuffle([s0, s1], LOWER_1)
        u2: T.let[T.float32x4] = T.Shuffle([s2, s3], UPPER_1)
        u3: T.let[T.float32x4] = T.Shuffle([s2, s3], LOWER_1)
        b[q * 4 : q * 4 + 4] = u0
        b[q * 4 + 4 : q * 4 + 8] = u1
        b[q * 4 + 8 : q * 4 + 12] = u2
        b[q * 4 + 12 : q * 4 + 16] = u3


@T.prim_func
def _overlapping(a: T.Buffer((32,), "float32"), b: T.Buffer((32,), "float32")):
    T.attr("default", "device_type", 1)
    for p in range(8):  # 8 positions a channel but channels 4 apart: an element written twice
        b[T.Ramp(p, 4, 4)] = a[T.Ramp(p * 4, 1, 4)]


@T.prim_func
def _on_a_gpu(a: T.Buffer((24,), "float32"), b: T.Buffer((24,), "float32")):
    T.attr("default", "device_type", 2)
    for p in range(6):
        b[p * 4 : p * 4 + 4] = a[T.Ramp(p, 6, 4)]


@T.prim_func
def _computed(a: T.Buffer((24,), "float32"), b: T.Buffer((24,), "float32")):
    T.attr("default", "device_type", 1)
    for p in range(6):  # not a copy: the value is computed from the read
        b[p * 4 : p * 4 + 4] = a[T.Ramp(p, 6, 4)] * T.Broadcast(T.float32(2), 4)


@pytest.fixture
def four_lanes(monkeypatch):
    """Transposes of 4 lanes, so the expected functions stay short."""
    monkeypatch.setattr(blocked_copies_as_transposes, "LANES", (4,))


@pytest.mark.parametrize(
    ("before", "expected"),
    [(_gather, _gather_expected), (_scatter, _scatter_expected)],
    ids=["planar to blocked", "blocked to planar"],
)
def test_a_blocked_copy_becomes_whole_vector_reads_a_transpose_and_whole_vector_writes(
    before, expected, four_lanes
):
    """Each ``L`` positions: ``L`` vectors read whole, two stages of shuffles (the 2 x 2
    blocks swapped, then the elements), ``L`` vectors written whole; positions past the last
    whole ``L`` (6 = 4 + 2) stay the loop they were."""
    want = expected.with_attr("global_symbol", before.attrs["global_symbol"])
    tvm.ir.assert_structural_equal(transposed(before), want, map_free_vars=True)


@pytest.mark.parametrize("func", [_overlapping, _on_a_gpu, _computed],
                         ids=["overlapping", "device kernel", "computed"])  # fmt: skip
def test_copies_that_may_overlap_gpu_kernels_and_computed_values_stay(func, four_lanes):
    assert transposed(func) is func


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("positions", [49, 20, 16])
@pytest.mark.parametrize("scatter", [False, True], ids=["gather", "scatter"])
def test_built_copies_equal_numpys_transpose(lanes, positions, scatter):
    """Copies of 32 channels (blocks of ``lanes``, in parallel) of ``positions`` positions
    built for this CPU by the build's TIR pipeline: the result is numpy's transpose, and the
    LLVM code reads no lane alone where ``positions`` is a whole number of vectors."""
    channels, n = 32, 32 * positions

    @T.prim_func
    def gather(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32")):
        for c0 in T.parallel(channels // lanes):
            for p in range(positions):
                for c in T.vectorized(lanes):
                    b[c0 * lanes * positions + p * lanes + c] = a[
                        c0 * lanes * positions + c * positions + p
                    ]

    @T.prim_func
    def scatter_(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32")):
        for c0 in T.parallel(channels // lanes):
            for p in range(positions):
                for c in T.vectorized(lanes):
                    b[c0 * lanes * positions + c * positions + p] = a[
                        c0 * lanes * positions + p * lanes + c
                    ]

    func = (scatter_ if scatter else gather).with_attr("global_symbol", "main")
    target = make_target({"kind": "llvm", "mcpu": "x86-64-v3" if lanes == 8 else "skylake-avx512"})
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=TIR_PIPELINE)
    ll = lib.mod.inspect_source("ll") if hasattr(lib, "mod") else lib.inspect_source("ll")
    if positions % lanes == 0:
        assert "insertelement" not in ll and "extractelement" not in ll
    assert "shufflevector" in ll
    if lanes == 16 and not host_has_avx512():
        return
    a = np.random.default_rng(0).standard_normal(n).astype("float32")
    b = tvm.runtime.tensor(np.zeros(n, "float32"))
    lib["main"](tvm.runtime.tensor(a), b)
    shape = (
        (channels // lanes, positions, lanes) if scatter else (channels // lanes, lanes, positions)
    )
    np.testing.assert_array_equal(b.numpy(), a.reshape(shape).transpose(0, 2, 1).ravel())
