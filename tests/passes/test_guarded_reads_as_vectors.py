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
        else:  # the padded start: the lanes inside read under a mask, zero on the others
            b[chunk * 4 : chunk * 4 + 4] = T.Select(
                T.And(
                    T.Broadcast(1, 4) <= T.Ramp(chunk * 4, 1, 4),
                    T.Ramp(chunk * 4, 1, 4) < T.Broadcast(9, 4),
                ),
                T.masked_load(
                    "float32x4",
                    a,
                    T.Ramp(chunk * 4 - 1, 1, 4),
                    T.And(
                        T.Broadcast(1, 4) <= T.Ramp(chunk * 4, 1, 4),
                        T.Ramp(chunk * 4, 1, 4) < T.Broadcast(9, 4),
                    ),
                ),
                T.Broadcast(T.float32(0), 4),
            )
    # lanes 8 and 9, past the last whole chunk: one vector of 4, its first two stored
    T.masked_store(
        b,
        T.Select(
            T.And(
                T.And(T.Broadcast(-7, 4) <= T.Ramp(0, 1, 4), T.Ramp(0, 1, 4) < T.Broadcast(1, 4)),
                T.Ramp(8, 1, 4) < T.Broadcast(10, 4),
            ),
            T.masked_load(
                "float32x4",
                a,
                T.Ramp(7, 1, 4),
                T.And(
                    T.And(
                        T.Broadcast(-7, 4) <= T.Ramp(0, 1, 4), T.Ramp(0, 1, 4) < T.Broadcast(1, 4)
                    ),
                    T.Ramp(8, 1, 4) < T.Broadcast(10, 4),
                ),
            ),
            T.Broadcast(T.float32(0), 4),
        ),
        T.Ramp(8, 1, 4),
        T.Ramp(8, 1, 4) < T.Broadcast(10, 4),
    )


@T.prim_func
def _padded_lane_by_lane(a: T.Buffer((8,), "float32"), b: T.Buffer((10,), "float32")):
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


def test_a_padded_copy_runs_whole_vectors_inside_and_masked_ones_at_its_ends(whole_vectors):
    """Chunks of 4 lanes: the one whose first and last lanes are inside the input is one
    vector read and one vector write; the one at the padded start reads the lanes inside
    under a mask, and the lanes past the last whole chunk are one masked vector."""
    tvm.ir.assert_structural_equal(
        in_vectors(_padded),
        _padded_expected.with_attr("global_symbol", "_padded"),
        map_free_vars=True,
    )


def test_without_masked_edges_the_ends_run_lane_by_lane(whole_vectors, monkeypatch):
    monkeypatch.setattr(guarded_reads_as_vectors, "MASKED_EDGES", False)
    tvm.ir.assert_structural_equal(
        in_vectors(_padded),
        _padded_lane_by_lane.with_attr("global_symbol", "_padded"),
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


def _rows_padded_at_their_ends(channels: int, rows: int, width: int):
    """The copy that pads the rows of a convolution's input tile at their ends only (a tile
    cut from the middle of a map: its rows come whole from the tiles around it), each padded
    row one vector wide as the convolution rule schedules it."""

    @T.prim_func
    def copy(
        a: T.Buffer((channels * rows * width,), "float32"),
        b: T.Buffer((channels * rows * (width + 2),), "float32"),
    ):
        for c, r in T.grid(channels, rows):
            for w in T.vectorized(width + 2):
                b[(c * rows + r) * (width + 2) + w] = T.if_then_else(
                    w >= 1 and w < width + 1, a[(c * rows + r) * width + w - 1], T.float32(0)
                )

    return copy.with_attr("global_symbol", "main")


def _ll(func, mcpu: str):
    lib = tvm.compile(
        tvm.IRModule({"main": func}),
        target=make_target({"kind": "llvm", "mcpu": mcpu}),
        tir_pipeline=TIR_PIPELINE,
    )
    return lib, (lib.mod if hasattr(lib, "mod") else lib).inspect_source("ll")


@pytest.mark.parametrize("width", [7, 3])
@pytest.mark.parametrize("masked", [True, False], ids=["masked edges", "lane by lane"])
def test_rows_padded_at_their_ends_gather_nothing_for_zen_4(masked, width, monkeypatch):
    """Built for Zen 4 (compiled, not run: this host may lack AVX-512), rows of 7 padded to 9
    (a chunk of 8 lanes and one lane) or of 3 padded to 5 (less than a chunk) lane by lane
    became, in LLVM, gathers and scatters across the channels; with the padded ends as masked
    vectors the copy reads and writes whole vectors."""
    monkeypatch.setattr(guarded_reads_as_vectors, "MASKED_EDGES", masked)
    _, ll = _ll(_rows_padded_at_their_ends(64, 3, width), "znver4")
    gathers = "gather" in ll or "scatter" in ll
    assert gathers != masked
    assert ("masked.load" in ll) == masked


@pytest.mark.parametrize("width", [7, 14, 3, 1])
def test_rows_padded_at_their_ends_equal_numpy(width):
    """Built for AVX2 (chunks of 4 lanes) and run: every row as numpy pads it (one zero either
    end), rows shorter than a chunk included."""
    channels, rows = 16, 3
    lib, _ = _ll(_rows_padded_at_their_ends(channels, rows, width), "haswell")
    a = np.random.default_rng(0).standard_normal(channels * rows * width).astype("float32")
    b = tvm.runtime.tensor(np.full(channels * rows * (width + 2), 9.0, "float32"))
    lib["main"](tvm.runtime.tensor(a), b)
    want = np.pad(a.reshape(channels * rows, width), ((0, 0), (1, 1)))
    np.testing.assert_array_equal(b.numpy(), want.ravel())
