"""WinogradConvolutions: CPU 3x3 convolutions of stride 1 as Winograd's F(4 x 4, 3 x 3) or
F(2 x 2, 3 x 3)."""

import numpy as np
import pytest
import tvm
from conftest import fused_kernels, one_op_module
from tvm import relax, s_tir

from tvm_hetero._compat import make_target
from tvm_hetero.ir.attrs import OP_PATTERN_ATTR, OPAQUE, WINOGRAD_ATTR
from tvm_hetero.passes import WinogradConvolutions
from tvm_hetero.passes.winograd_convolutions import (
    candidates,
    matrices,
    tile_size,
    transformed_weights,
    workload_key,
)
from tvm_hetero.schedules import kernel_choices, schedule_kernels

CPU = {"kind": "llvm", "mcpu": "haswell"}
"""8 float lanes: the channels below are whole vectors."""
AVX512 = {"kind": "llvm", "mcpu": "skylake-avx512"}
CUDA = {"kind": "cuda", "arch": "sm_80"}


def _conv_module(channels=16, out=24, size=(16, 16), batch=1, padding=(1, 1, 1, 1), stride=1,
                 dilation=1, groups=1, kernel=3, device=CPU, constant=True):  # fmt: skip
    """``main(x) = conv2d(x, w)`` with ``w`` a seeded constant (a parameter unless
    ``constant``)."""
    w_shape = (out, channels // groups, kernel, kernel)
    weights = relax.const(np.random.default_rng(3).standard_normal(w_shape).astype("float32"))
    params = [("x", (batch, channels, *size))] + ([] if constant else [("w", w_shape)])

    def conv(x, w=weights):
        return relax.op.nn.conv2d(x, w, stride, padding, dilation, groups)

    return one_op_module(device, params, conv)


def _run(mod, inputs):
    vm = relax.VirtualMachine(tvm.compile(relax.transform.LegalizeOps()(mod)), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()


def _inputs(mod):
    rng = np.random.default_rng(0)
    return [rng.standard_normal([int(d) for d in p.ty.shape.values]).astype("float32")
            for p in mod["main"].params]  # fmt: skip


@pytest.mark.parametrize(
    ("size", "m", "tiles"), [((30, 31), 4, 8 * 8), ((14, 15), 2, 7 * 8)]
)  # 4 x 4 tiles where they are 32 or more, else 2 x 2
def test_the_convolution_becomes_transforms_around_the_products(size, m, tiles):
    before = _conv_module(size=size)
    text = before.script()
    after = WinogradConvolutions()(before)
    assert before.script() == text  # the input is not mutated
    bindings = after["main"].body.blocks[0].bindings
    ops = [b.value.op.name for b in bindings]
    assert ops == ["relax.call_tir"] * 2 + ["relax.matmul"] + ["relax.call_tir"] * 2
    names = [b.value.args[0].name_hint for b in bindings if b.value.op.name == "relax.call_tir"]
    assert names == ["winograd_nhwc", "winograd_input", "winograd_output", "winograd_nchw"]
    shapes = [[int(d) for d in b.var.ty.shape.values] for b in bindings]
    side = m + 2
    padded = [-(-v // m) * m + 2 for v in size]
    assert shapes[0] == [1, *padded, 16]  # padded to whole tiles, channels last
    assert shapes[1] == [side * side, tiles, 16]
    assert shapes[2] == [side * side, tiles, 24]
    assert shapes[3] == [tiles, m, m, 24]
    assert shapes[4] == [1, 24, *size]
    weights = bindings[2].value.args[1].value.numpy()
    w = before["main"].body.blocks[0].bindings[0].value.args[1].value.numpy()
    np.testing.assert_allclose(weights, transformed_weights(w, m), rtol=1e-6)
    for name, kind in (("winograd_input", "input"), ("winograd_output", "output")):
        (func,) = [f for gv, f in after.functions_items() if gv.name_hint == name]
        assert (func.attrs[WINOGRAD_ATTR], int(func.attrs[OP_PATTERN_ATTR])) == (kind, OPAQUE)


@pytest.mark.parametrize("m", [4, 2])
def test_the_matrices_compute_a_tile_of_a_correlation(m):
    """``A^T [(G g G^T) * (B^T d B)] A`` is the m x m valid correlation of an m + 2 window."""
    a, b, g = matrices(m)
    rng = np.random.default_rng(1)
    d, w = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
    want = np.array([[np.sum(d[i : i + 3, j : j + 3] * w) for j in range(m)] for i in range(m)])
    got = a.T @ ((g @ w @ g.T) * (b.T @ d @ b)) @ a
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "case",
    [dict(), dict(size=(13, 21)), dict(padding=(0, 0, 0, 0), size=(18, 18)),
     dict(padding=(2, 0, 1, 2)), dict(batch=2, size=(12, 12)), dict(channels=32, out=8),
     dict(size=(29, 32)), dict(size=(26, 27), padding=(1, 2, 0, 1)), dict(channels=12),
     dict(out=20), dict(channels=6, out=7)],
)  # fmt: skip
def test_numbers_match_the_convolution(case):
    """Equal up to rounding: Winograd's sums differ from the convolution's by about 1e-6 of
    the output's scale."""
    before = _conv_module(**case)
    after = WinogradConvolutions()(before)
    assert "winograd_input" in after.script()
    inputs = _inputs(before)
    want = _run(before, inputs)
    got = _run(after, inputs)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize(
    "case",
    [dict(stride=2), dict(dilation=2), dict(groups=2), dict(kernel=1, padding=(0, 0, 0, 0)),
     dict(kernel=5, padding=(2, 2, 2, 2)), dict(channels=4), dict(out=5),
     dict(size=(7, 7)), dict(size=(10, 11)), dict(device=CUDA), dict(constant=False)],
)  # fmt: skip
def test_other_convolutions_stay(case):
    """Strided, dilated, grouped, not 3x3, channels that whole vectors (8 here) would hold
    with more than a third of zeros, maps
    of fewer than 32 tiles of 2 x 2, GPU convolutions and weights that are no constant."""
    mod = _conv_module(**case)
    tvm.ir.assert_structural_equal(WinogradConvolutions()(mod), mod)


@pytest.mark.parametrize(
    ("batch", "height", "width", "m"),
    [(1, 56, 56, 4), (1, 28, 28, 4), (1, 22, 22, 4), (1, 20, 20, 2), (1, 14, 14, 2),
     (1, 11, 12, 2), (1, 10, 11, 0), (1, 7, 7, 0), (2, 14, 14, 4), (2, 7, 7, 2)],
)  # fmt: skip
def test_the_tile_is_the_largest_that_cuts_the_batch_into_32_tiles_or_more(batch, height, width, m):
    assert tile_size(batch, height, width) == m


def test_avx512_takes_channels_in_vectors_of_16():
    """24 channels are a vector and a half of AVX-512's 16 lanes: 32, a third more; 8 would be
    16, twice their number."""
    after = WinogradConvolutions()(_conv_module(device=AVX512, channels=24, out=32))
    assert [int(d) for d in after["main"].body.blocks[0].bindings[0].var.ty.shape.values][-1] == 32
    mod = _conv_module(device=AVX512, channels=8, out=32)
    tvm.ir.assert_structural_equal(WinogradConvolutions()(mod), mod)


@pytest.mark.parametrize(("size", "m", "tiles"), [((30, 31), 4, 64), ((16, 16), 2, 64)])
def test_the_transforms_are_scheduled_a_tile_and_vector_a_task_positions_unrolled(size, m, tiles):
    """The ``winograd`` rule: one parallel task a tile and vector of channels, the window's
    positions of the second pass unrolled over one vector, the first pass inside the task in a
    local buffer; the numbers equal TVM's default build of the same kernels."""
    target = make_target(CPU)
    mod = fused_kernels(WinogradConvolutions()(_conv_module(size=size)), target)
    scheduled = schedule_kernels(mod, "rules")
    rules = {c.kernel: c.label for c in kernel_choices(scheduled)}
    assert (rules["winograd_input"], rules["winograd_output"]) == ("rule:winograd",) * 2
    serial, parallel, vectorized, unrolled = 0, 1, 2, 3

    def loops(kernel, block):
        sch = s_tir.Schedule(scheduled[kernel])
        found = sch.get_loops(sch.get_sblock(block))
        return [(int(sch.get(loop).kind), int(sch.get(loop).extent)) for loop in found]

    side = m + 2
    tasks = (parallel, tiles * 2)  # tiles x 2 vectors of 8 input channels
    assert loops("winograd_input", "winograd_input") == [
        tasks, (unrolled, side * side), (vectorized, 8)
    ]  # fmt: skip
    rows = loops("winograd_input", "winograd_rows")
    assert rows[0] == tasks and rows[-1] == (vectorized, 8)
    assert {kind for kind, _ in rows[1:-1]} <= {unrolled}
    assert loops("winograd_output", "winograd_output") == [
        (parallel, tiles * 3), (unrolled, m), (unrolled, m), (vectorized, 8)
    ]  # fmt: skip
    assert serial not in {kind for kind, _ in rows}
    padded = [-(-v // m) * m + 2 for v in size]
    shapes = {"winograd_input": [(1, *padded, 16), (side * side, tiles, 16)],
              "winograd_output": [(side * side, tiles, 24), (tiles, m, m, 24)]}  # fmt: skip
    for kernel, (shape, out_shape) in shapes.items():
        x = np.random.default_rng(0).standard_normal(shape).astype("float32")
        outs = []
        for func in (mod[kernel], scheduled[kernel]):
            lib = tvm.compile(func.with_attr("global_symbol", "f"), target)
            out = tvm.runtime.empty(out_shape, "float32")
            lib["f"](tvm.runtime.tensor(x), out)
            outs.append(out.numpy())
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def _key(mod):
    call = mod["main"].body.blocks[0].bindings[0].value
    return workload_key(call, str(make_target(CPU)))


def _tile_of(after):
    """The tile size of the rewritten convolution (0: left alone)."""
    bindings = after["main"].body.blocks[0].bindings
    shapes = [[int(d) for d in b.var.ty.shape.values] for b in bindings]
    return shapes[3][1] if len(bindings) == 5 else 0


@pytest.mark.parametrize(("size", "tile"), [((30, 31), 0), ((30, 31), 2), ((14, 15), 4),
                                            ((7, 7), 2), ((7, 7), 4)])  # fmt: skip
def test_a_measured_tile_wins_over_the_static_rule(size, tile):
    """``tiles`` names the size by workload key, 0 leaving the convolution to the rule's
    kernel, whatever the map (a 7 x 7 map the static rule leaves alone takes 2 x 2 tiles);
    the numbers still equal the convolution's."""
    before = _conv_module(size=size)
    after = WinogradConvolutions(tiles={_key(before): tile})(before)
    assert _tile_of(after) == tile
    if tile == 0:
        tvm.ir.assert_structural_equal(after, before)
        return
    inputs = _inputs(before)
    want = _run(before, inputs)
    assert np.abs(_run(after, inputs) - want).max() <= 1e-5 * np.abs(want).max()


def test_a_convolution_the_tiles_do_not_name_takes_the_static_rule():
    before = _conv_module(size=(30, 31))
    other = workload_key(_conv_module(size=(14, 15))["main"].body.blocks[0].bindings[0].value,
                         str(make_target(CPU)))  # fmt: skip
    assert _tile_of(WinogradConvolutions(tiles={other: 0})(before)) == 4
    assert _key(before) != other


def test_tiles_other_than_4_2_or_0_are_refused():
    with pytest.raises(ValueError, match="tiles must be 0 or one of"):
        WinogradConvolutions(tiles={"k": 3})


def test_the_key_names_shapes_padding_and_target():
    key = _key(_conv_module(size=(30, 31), padding=(2, 0, 1, 2)))
    assert key.startswith("1x16x30x31 * 24x16x3x3 pad 2,0,1,2 | ")
    assert key.endswith(str(make_target(CPU))) and "haswell" in key


def test_candidates_are_every_convolution_the_pass_could_rewrite_whatever_its_map():
    """The 7 x 7 map (too few tiles for the static rule) is a candidate; strided, grouped and
    GPU convolutions are not."""
    assert list(candidates(_conv_module(size=(7, 7)))) == [_key(_conv_module(size=(7, 7)))]
    for case in (dict(stride=2), dict(groups=2), dict(device=CUDA), dict(channels=4)):
        assert candidates(_conv_module(**case)) == {}
