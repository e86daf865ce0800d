"""Element-wise kernels that read an input transposed (``schedules/cpu/transposed.py``): square
tiles of the two axes that move, rows of channel vectors where the read is Winograd's tiles, the
kernels it leaves alone, and equal numbers."""

import numpy as np
import pytest
import tvm
from conftest import fused_body, fused_kernels, kernel_script, one_op_module
from tvm import relax, s_tir
from tvm.script import tirx as T

from tvm_hetero._compat import PrimFunc, make_target
from tvm_hetero.build.multi_device import TIR_PIPELINE
from tvm_hetero.passes import WinogradConvolutions
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu import transposed
from tvm_hetero.schedules.cpu.common import spatial_inlined
from tvm_hetero.schedules.cpu.transposed import blocked_rows, transposed_tile

AVX2_DEVICE = {"kind": "llvm", "mcpu": "haswell", "num-cores": 2}
AVX2 = make_target(AVX2_DEVICE)  # 8 float lanes
SERIAL = make_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 1})


@T.prim_func(private=True, s_tir=True)
def tokens_to_map(
    x: T.Buffer((T.int64(1), T.int64(1024), T.int64(32)), "float32"),
    y: T.Buffer((T.int64(1), T.int64(32), T.int64(32), T.int64(32)), "float32"),
):
    for n, c, h, w in T.grid(T.int64(1), T.int64(32), T.int64(32), T.int64(32)):
        with T.sblock("T_reshape"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            y[vn, vc, vh, vw] = x[
                T.int64(0),
                (vh * T.int64(32) + vw) % T.int64(1024),
                ((vh * T.int64(32) + vw) // T.int64(1024) + vc) % T.int64(32),
            ]


@T.prim_func(private=True, s_tir=True)
def tokens_to_map_tiled(
    x: T.Buffer((T.int64(1), T.int64(1024), T.int64(32)), "float32"),
    y: T.Buffer((T.int64(1), T.int64(32), T.int64(32), T.int64(32)), "float32"),
):
    for n_c_0_h_fused in T.parallel(T.int64(128)):
        for w_0, c_1 in T.grid(T.int64(4), T.int64(8)):
            for w_1 in T.vectorized(T.int64(8)):
                with T.sblock("T_reshape"):
                    vn = T.axis.spatial(T.int64(1), T.int64(0))
                    vc = T.axis.spatial(
                        T.int64(32), n_c_0_h_fused // T.int64(32) * T.int64(8) + c_1
                    )
                    vh = T.axis.spatial(T.int64(32), n_c_0_h_fused % T.int64(32))
                    vw = T.axis.spatial(T.int64(32), w_0 * T.int64(8) + w_1)
                    T.reads(x[T.int64(0), (vh * T.int64(32) + vw) % T.int64(1024),
                              ((vh * T.int64(32) + vw) // T.int64(1024) + vc) % T.int64(32)])  # fmt: skip
                    T.writes(y[vn, vc, vh, vw])
                    y[vn, vc, vh, vw] = x[
                        T.int64(0),
                        (vh * T.int64(32) + vw) % T.int64(1024),
                        ((vh * T.int64(32) + vw) // T.int64(1024) + vc) % T.int64(32),
                    ]


def test_a_tokens_to_map_transpose_is_cut_in_square_tiles_of_a_vector():
    """Expected: a tile of 8 channels by 8 columns, the channels inside the column tile loop,
    each channel's 8 columns one vector written whole; the rest fused in parallel."""
    sch = s_tir.Schedule(tokens_to_map)
    assert transposed_tile(sch, sch.get_sblock("T_reshape"), AVX2)
    tvm.ir.assert_structural_equal(sch.mod["main"], tokens_to_map_tiled)


def _tokens_to_map(channels: int, side: int):
    def body(bb, x):
        return relax.op.reshape(relax.op.permute_dims(x, [0, 2, 1]), (1, channels, side, side))

    return [(1, side * side, channels)], body


def _tokens_to_map_twice(channels: int, side: int):
    def body(bb, x):
        y = relax.op.reshape(relax.op.permute_dims(x, [0, 2, 1]), (1, channels, side, side))
        return relax.op.concat([y, relax.op.nn.relu(y)], axis=1)

    return [(1, side * side, channels)], body


def _map_to_tokens(channels: int, side: int):
    def body(bb, x):
        return relax.op.permute_dims(relax.op.reshape(x, (1, channels, side * side)), [0, 2, 1])

    return [(1, channels, side, side)], body


def _blocked(shape, block: int):
    def body(bb, x):
        index_map = lambda n, c, h, w: (n, c // block, h, w, c % block)  # noqa: E731
        return relax.op.layout_transform(x, index_map=index_map)

    return [shape], body


def _unblocked(shape):
    block = shape[-1]

    def body(bb, x):
        index_map = lambda n, k, h, w, c: (n, k * block + c, h, w)  # noqa: E731
        return relax.op.layout_transform(x, index_map=index_map)

    return [shape], body


def _add(shape):
    return [shape, shape], lambda bb, a, b: relax.op.add(a, b)


TILED = {  # case: (shapes, body), rule, tile (across, along the vector), its loops
    "tokens_to_map": (_tokens_to_map(32, 32), "injective", (8, 8), "ax3_0, ax1_1"),
    "tokens_to_map_12_columns": (_tokens_to_map(24, 12), "injective", (8, 6), "ax3_0, ax1_1"),
    "tokens_to_map_twice": (_tokens_to_map_twice(16, 32), "pieces", (8, 8), "ax3_0, ax1_1"),
    # x[n, c, s // W, s % W]: a tile's tokens one row of the map (7 of a row of 14)
    "map_to_tokens": (_map_to_tokens(32, 32), "injective", (8, 8), "ax2_0, ax1_1"),
    "map_to_tokens_14_columns": (_map_to_tokens(32, 14), "injective", (7, 8), "ax2_0, ax1_1"),
    # TVM's layout_transform loops over its input and writes transposed: NCHW -> NCHW16c
    "to_blocked_channels": (_blocked((1, 32, 16, 16), 16), "injective", (8, 8), "i2_0, i0_1"),
    "from_blocked_channels": (_unblocked((1, 2, 16, 16, 16)), "injective", (8, 8), "i3_0, i2_1"),
}
UNTILED = {
    "map_to_tokens_3_columns": _map_to_tokens(32, 3),  # runs of 3 tokens: no tile of 4
    "add": _add((1, 32, 32, 32)),
    "tokens_to_map_3_channels": _tokens_to_map(3, 32),  # no tile of 4 or more channels
}


def _run(mod, target, shapes) -> np.ndarray:
    rng = np.random.default_rng(0)
    arrays = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32")) for s in shapes]
    return relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())["main"](*arrays).numpy()


@pytest.mark.parametrize("case", sorted(TILED))
def test_transposed_kernels_get_tiles_and_the_same_numbers(case):
    (shapes, body), rule, (across, along), loops = TILED[case]
    mod = fused_body(shapes, body, AVX2)
    scheduled = schedule_kernels(mod, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {f"rule:{rule}"}
    text = kernel_script(scheduled)
    # each block (a piece of the concatenation too): the tile's loop across is just outside
    # the vector, inside the loop over the vector's tiles
    lines = text.splitlines()
    vectors = [i for i, line in enumerate(lines) if "T.vectorized" in line]
    assert vectors, text
    for i in vectors:
        assert f"T.vectorized(T.int64({along}))" in lines[i], text
        assert f"{loops} in T.grid(" in lines[i - 1], text
        assert lines[i - 1].endswith(f"T.int64({across})):"), text
    np.testing.assert_array_equal(_run(scheduled, AVX2, shapes), _run(mod, AVX2, shapes))


@pytest.mark.parametrize("case", sorted(UNTILED))
def test_kernels_without_a_transposed_read_keep_the_vector_of_the_innermost_axis(case):
    shapes, body = UNTILED[case]
    mod = fused_body(shapes, body, AVX2)
    scheduled = schedule_kernels(mod, "rules")
    func = next(f for _, f in mod.functions_items() if isinstance(f, PrimFunc))
    sch, blocks = spatial_inlined(func)
    assert not any(transposed_tile(sch, block, AVX2) for block in blocks)
    np.testing.assert_array_equal(_run(scheduled, AVX2, shapes), _run(mod, AVX2, shapes))


def test_a_serial_target_gets_the_tiles_with_no_parallel_loop():
    shapes, body = _tokens_to_map(32, 32)
    text = kernel_script(schedule_kernels(fused_body(shapes, body, SERIAL), "rules"))
    assert "T.parallel" not in text and "ax3_0, ax1_1 in T.grid(" in text, text


@T.prim_func(private=True, s_tir=True)
def tiles_as_a_map(
    z: T.Buffer((T.int64(36), T.int64(2), T.int64(2), T.int64(8)), "float32"),
    y: T.Buffer((T.int64(1), T.int64(8), T.int64(12), T.int64(12)), "float32"),
):
    for n, c, h, w in T.grid(T.int64(1), T.int64(8), T.int64(12), T.int64(12)):
        with T.sblock("compute"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            y[vn, vc, vh, vw] = T.max(
                z[vn * T.int64(36) + vh // T.int64(2) * T.int64(6) + vw // T.int64(2),
                  vh % T.int64(2), vw % T.int64(2), vc],
                T.float32(0.0),
            )  # fmt: skip


@T.prim_func(private=True, s_tir=True)
def tiles_as_a_map_in_rows(
    z: T.Buffer((T.int64(36), T.int64(2), T.int64(2), T.int64(8)), "float32"),
    y: T.Buffer((T.int64(1), T.int64(8), T.int64(12), T.int64(12)), "float32"),
):
    y_reindex = T.sblock_alloc_buffer(
        (T.int64(1), T.int64(1), T.int64(12), T.int64(12), T.int64(8))
    )
    for n_c_0_h_fused in range(T.int64(12)):
        for w in range(T.int64(12)):
            for c in T.vectorized(T.int64(8)):
                with T.sblock("compute"):
                    vn = T.axis.spatial(T.int64(1), T.int64(0))
                    vc, vh, vw = T.axis.remap("SSS", [c, n_c_0_h_fused, w])
                    T.reads(z[vn * T.int64(36) + vh // T.int64(2) * T.int64(6) + vw // T.int64(2),
                              vh % T.int64(2), vw % T.int64(2), vc])  # fmt: skip
                    T.writes(y_reindex[vn, T.int64(0), vh, vw, vc])
                    y_reindex[vn, T.int64(0), vh, vw, vc] = T.max(
                        z[vn * T.int64(36) + vh // T.int64(2) * T.int64(6) + vw // T.int64(2),
                          vh % T.int64(2), vw % T.int64(2), vc],
                        T.float32(0.0),
                    )  # fmt: skip
        for w in range(T.int64(12)):
            for c in T.vectorized(T.int64(8)):
                with T.sblock("y_reindex"):
                    v0 = T.axis.spatial(T.int64(1), T.int64(0))
                    v1, v2, v3 = T.axis.remap("SSS", [c, n_c_0_h_fused, w])
                    T.reads(y_reindex[v0, T.int64(0), v2, v3, v1])
                    T.writes(y[v0, v1, v2, v3])
                    y[v0, v1, v2, v3] = y_reindex[v0, T.int64(0), v2, v3, v1]


def test_winograd_tiles_back_as_a_map_are_written_a_row_of_channel_vectors_and_copied_out():
    """Expected: a task a row of 8 channels (one vector; serial below the parallel size): the
    ReLU of each position's channels, read whole from the tiles, into the row's ``[W, 8]``
    buffer, then a loop of positions writing each one's vector of channels to the map (the
    copy ``BlockedCopiesAsTransposes`` runs as transposes)."""
    sch = s_tir.Schedule(tiles_as_a_map)
    assert blocked_rows(sch, sch.get_sblock("compute"), AVX2)
    tvm.ir.assert_structural_equal(sch.mod["main"], tiles_as_a_map_in_rows)


W8 = np.random.default_rng(3).standard_normal((8, 8, 3, 3)).astype("float32")
W16 = np.random.default_rng(4).standard_normal((16, 8, 3, 3)).astype("float32")


def _conv(x, w=W8):
    return relax.op.nn.conv2d(x, relax.const(w), 1, (1, 1, 1, 1))


def _relu(x):
    return relax.op.nn.relu(_conv(x))


def _residual(x):
    return relax.op.nn.relu(relax.op.add(_conv(x), x))


def _concatenated(x):
    return relax.op.concat([relax.op.nn.relu(x), _relu(x)], axis=1)


WINOGRAD_MAPS = {  # case: (input shape, the model after the convolution's input), rule
    "relu": ((1, 8, 16, 16), _relu, "injective"),
    "residual": ((1, 8, 16, 16), _residual, "injective"),
    "concatenated": ((1, 8, 16, 16), _concatenated, "pieces"),
    "two_vectors_batch_2": ((2, 8, 12, 12), lambda x: _conv(x, W16), "injective"),
}


@pytest.mark.parametrize("case", sorted(WINOGRAD_MAPS))
def test_kernels_reading_winograd_tiles_copy_out_by_transposes_and_keep_their_numbers(case):
    """A Winograd convolution's last kernel with what fuses into it (a ReLU, a residual sum,
    a concatenation's piece): a row buffer of channel vectors (a residual copied into one
    too), built by the package's TIR pipeline into shuffles; the numbers are the unscheduled
    kernels'."""
    shape, body, rule = WINOGRAD_MAPS[case]
    mod = fused_kernels(WinogradConvolutions()(one_op_module(AVX2_DEVICE, [("x", shape)], body)),
                        AVX2)  # fmt: skip
    scheduled = schedule_kernels(mod, "rules")
    (name,) = [gv.name_hint for gv, _ in mod.functions_items() if "winograd_nchw" in gv.name_hint]
    assert {c.kernel: c.label for c in kernel_choices(scheduled)}[name] == f"rule:{rule}"
    text = scheduled[name].script()
    assert "_reindex = T.sblock_alloc_buffer" in text, text
    assert ("_global = T.sblock_alloc_buffer" in text) == (case == "residual"), text
    libs = [
        tvm.compile(tvm.IRModule({"k": f[name].with_attr("global_symbol", "k")}), AVX2,
                    tir_pipeline=TIR_PIPELINE)
        for f in (scheduled, mod)
    ]  # fmt: skip
    assert "shufflevector" in libs[0].mod.inspect_source("ll")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in p.shape]).astype("float32")
            for p in scheduled[name].params]  # fmt: skip
    outs = []
    for lib in libs:
        arrays = [tvm.runtime.tensor(a) for a in args]
        lib["k"](*arrays)
        outs.append(arrays[-1].numpy())
    np.testing.assert_array_equal(outs[0], outs[1])


@T.prim_func(private=True, s_tir=True)
def tiles_beside_a_map(
    a: T.Buffer((T.int64(1), T.int64(8), T.int64(12), T.int64(12)), "float32"),
    z: T.Buffer((T.int64(36), T.int64(2), T.int64(2), T.int64(8)), "float32"),
    y: T.Buffer((T.int64(1), T.int64(16), T.int64(12), T.int64(12)), "float32"),
):
    for n, c, h, w in T.grid(T.int64(1), T.int64(16), T.int64(12), T.int64(12)):
        with T.sblock("T_concat"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            y[vn, vc, vh, vw] = T.if_then_else(
                T.int64(8) <= vc,
                z[vh // T.int64(2) * T.int64(6) + vw // T.int64(2), vh % T.int64(2),
                  vw % T.int64(2), vc - T.int64(8)],
                a[vn, vc, vh, vw],
            )  # fmt: skip


def test_reads_rows_cannot_take_are_left_to_square_tiles(monkeypatch):
    """12 channels (neither 8 nor 4 lanes: 4 is under half of AVX2's vector); a concatenation
    left whole, whose other input a channel vector would gather; off, none."""
    body = lambda x: relax.op.nn.relu(_conv(x, W16[:12]))  # noqa: E731
    mod = fused_kernels(
        WinogradConvolutions()(one_op_module(AVX2_DEVICE, [("x", (1, 8, 16, 16))], body)), AVX2
    )
    (func,) = [f for gv, f in mod.functions_items() if "winograd_nchw" in gv.name_hint]
    sch, (block,) = spatial_inlined(func)
    assert not blocked_rows(sch, block, AVX2)
    sch = s_tir.Schedule(tiles_beside_a_map)
    assert not blocked_rows(sch, sch.get_sblock("T_concat"), AVX2)
    monkeypatch.setattr(transposed, "BLOCKED_ROWS", False)
    sch = s_tir.Schedule(tiles_as_a_map)
    assert not blocked_rows(sch, sch.get_sblock("compute"), AVX2)


@T.prim_func(private=True, s_tir=True)
def take_at_a_scalar(
    x: T.Buffer((T.int64(1), T.int64(128), T.int64(8), T.int64(3), T.int64(32)), "float32"),
    i: T.Buffer((), "int64"),
    y: T.Buffer((T.int64(1), T.int64(128), T.int64(8), T.int64(32)), "float32"),
):
    for n, c, h, w in T.grid(T.int64(1), T.int64(128), T.int64(8), T.int64(32)):
        with T.sblock("T_take"):
            vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
            y[vn, vc, vh, vw] = x[
                vn, vc, vh, T.truncmod(T.truncmod(i[()], T.int64(3)) + T.int64(3), T.int64(3)), vw
            ]


def test_a_read_of_a_scalar_is_no_tile_and_the_kernel_keeps_its_rule():
    """BLOOM's query, key and value taken from one tensor by a scalar index (a 0-d buffer
    read beside the 4-D one): the rows rule had unpacked the scalar's empty index and failed,
    and the kernel fell back to TVM's default schedule with a warning."""
    from tvm_hetero.schedules.cpu.injective import Injective

    sch = s_tir.Schedule(take_at_a_scalar)
    assert not blocked_rows(sch, sch.get_sblock("T_take"), AVX2)
    scheduled = Injective().schedule(take_at_a_scalar, AVX2)
    assert "T.vectorized" in scheduled.mod["main"].script()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 128, 8, 3, 32)).astype("float32")
    got = tvm.runtime.empty((1, 128, 8, 32), "float32")
    run = tvm.compile(scheduled.mod["main"].with_attr("global_symbol", "take"), AVX2)["take"]
    run(tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(5, "int64")), got)
    np.testing.assert_array_equal(got.numpy(), x[:, :, :, 2])
