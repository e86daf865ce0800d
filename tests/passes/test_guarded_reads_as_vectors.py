"""GuardedReadsAsVectors: a loop storing a guarded read (a copy that pads), a vector at a time
where the guard holds on every lane."""

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_hetero._compat import make_target
from tvm_hetero.build.multi_device import TIR_PIPELINE
from tvm_hetero.passes import guarded_reads_as_vectors
from tvm_hetero.passes.guarded_reads_as_vectors import in_vectors

SSE = {"kind": "llvm", "mcpu": "x86-64"}
"""A target of 4 float lanes, so the expected functions stay short."""


@T.prim_func
def _padded(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
    T.func_attr({"target": T.target(SSE)})
    T.attr("default", "device_type", 1)
    for i in range(10):  # 8 elements with one of padding either side
        b[i] = T.if_then_else(i >= 1 and i < 9, a[i - 1], T.float32(0))


@T.prim_func
def _padded_expected(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
    T.func_attr({"target": T.target(SSE)})
    T.attr("default", "device_type", 1)
    for chunk in range(2):
        if chunk == 1:  # lanes 4 to 7: every one inside the input
            b[chunk * 4 : chunk * 4 + 4] = a[T.Ramp(chunk * 4 - 1, 1, 4)]
        else:
            for lane in range(4):
                b[chunk * 4 + lane] = T.if_then_else(
                    1 <= chunk * 4 + lane and chunk * 4 + lane < 9,  # noqa: SIM300 (as TVM simplifies)
                    a[chunk * 4 + lane - 1],
                    T.float32(0),
                )
    for i in range(8, 10):  # past the last whole chunk: as before
        b[i] = T.if_then_else(i >= 1 and i < 9, a[i - 1], T.float32(0))


@T.prim_func
def _not_a_run(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
    T.func_attr({"target": T.target(SSE)})
    T.attr("default", "device_type", 1)
    for i in range(10):  # the lanes that meet it are no run: its ends say nothing
        b[i] = T.if_then_else(i != 4 and i < 8, a[i], T.float32(0))


@T.prim_func
def _strided_store(a: T.Buffer((8,), "float32"), b: T.Buffer((20,), "float32")):
    T.func_attr({"target": T.target(SSE)})
    T.attr("default", "device_type", 1)
    for i in range(10):
        b[i * 2] = T.if_then_else(i >= 1 and i < 9, a[i - 1], T.float32(0))


@T.prim_func
def _no_target(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
    T.attr("default", "device_type", 1)
    for i in range(10):
        b[i] = T.if_then_else(i >= 1 and i < 9, a[i - 1], T.float32(0))


@T.prim_func
def _on_a_gpu(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
    T.func_attr({"target": T.target(SSE)})
    T.attr("default", "device_type", 2)
    for i in range(10):
        b[i] = T.if_then_else(i >= 1 and i < 9, a[i - 1], T.float32(0))


@T.prim_func
def _unguarded(a: T.Buffer((10,), "float32"), b: T.Buffer((10,), "float32")):
    T.func_attr({"target": T.target(SSE)})
    T.attr("default", "device_type", 1)
    for i in range(10):  # nothing guarded: TVM's vectorizer's business
        b[i] = a[i]


@pytest.fixture
def whole_vectors(monkeypatch):
    monkeypatch.setattr(guarded_reads_as_vectors, "CHUNK_VECTORS", 1)


def test_a_padded_copy_runs_whole_vectors_inside_and_lanes_at_its_ends(whole_vectors):
    """Chunks of 4 lanes: the one whose first and last lanes are inside the input is one
    vector read and one vector write; the one at the padded start and the lanes past the
    last whole chunk stay guarded lane by lane."""
    tvm.ir.assert_structural_equal(
        in_vectors(_padded),
        _padded_expected.with_attr("global_symbol", "_padded"),
        map_free_vars=True,
    )


@pytest.mark.parametrize(
    "func", [_not_a_run, _strided_store, _no_target, _on_a_gpu, _unguarded],
    ids=["not a run", "strided store", "no target", "device kernel", "unguarded"],
)  # fmt: skip
def test_loops_it_cannot_prove_or_need_not_change_stay(func, whole_vectors):
    assert in_vectors(func) is func


@pytest.mark.parametrize("width", [112, 27])
def test_a_built_copy_by_column_phase_equals_numpy_and_gathers_nothing(width):
    """The copy that pads a stride-2 convolution's rows (one of padding left, the rest right)
    and lays them out by column phase, each phase's columns innermost, built for AVX2 by the
    build's TIR pipeline: numpy's numbers, strided reads shuffled, no gather."""
    rows, phase = 4, width // 2 + 1

    @T.prim_func
    def copy(a: T.Buffer((rows * width,), "float32"), b: T.Buffer((rows * 2 * phase,), "float32")):
        for r, p, c in T.grid(rows, 2, phase):
            b[r * 2 * phase + p * phase + c] = T.if_then_else(
                c * 2 + p >= 1 and c * 2 + p < width + 1,
                a[r * width + c * 2 + p - 1],
                T.float32(0),
            )

    target = make_target({"kind": "llvm", "mcpu": "haswell"})
    func = copy.with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=target, tir_pipeline=TIR_PIPELINE)
    ll = lib.mod.inspect_source("ll") if hasattr(lib, "mod") else lib.inspect_source("ll")
    assert "gather" not in ll and "shufflevector" in ll
    a = np.random.default_rng(0).standard_normal(rows * width).astype("float32")
    b = tvm.runtime.tensor(np.full(rows * 2 * phase, 9.0, "float32"))
    lib["main"](tvm.runtime.tensor(a), b)
    padded = np.zeros((rows, 2 * phase), "float32")
    padded[:, 1 : width + 1] = a.reshape(rows, width)
    want = padded.reshape(rows, phase, 2).transpose(0, 2, 1).ravel()
    np.testing.assert_array_equal(b.numpy(), want)
