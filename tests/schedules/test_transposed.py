"""Element-wise kernels that read an input transposed (``schedules/cpu/transposed.py``): square
tiles of the two axes that move, the kernels it leaves alone, and equal numbers."""

import numpy as np
import pytest
import tvm
from conftest import fused_body, kernel_script
from tvm import relax, s_tir
from tvm.script import tirx as T

from tvm_hetero._compat import PrimFunc, make_target
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu.common import spatial_inlined
from tvm_hetero.schedules.cpu.transposed import transposed_tile

AVX2 = make_target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})  # 8 float lanes
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
