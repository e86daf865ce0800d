"""PackConstantWeights: constant matmul weights of CPU kernels stored as register-tile panels."""

import re

import numpy as np
import pytest
import tvm
from conftest import fused_kernels
from tvm import relax
from tvm.ir.expr import Constant
from tvm.script import tirx as T

from tvm_hetero._compat import PrimFunc, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.passes import PackConstantWeights
from tvm_hetero.schedules import kernel_choices, schedule_kernels
from tvm_hetero.schedules.cpu.common import largest_divisor, vector_lanes
from tvm_hetero.schedules.cpu.matmul import (
    depth_block,
    padded_row_count,
    panel_width,
    rows_per_tile,
)

CPU = make_target(cpu_device().target)
W = np.random.default_rng(0).standard_normal((16, 32)).astype("float32")


def _module(weight_is_constant=True, target=CPU, rows=8):
    """``x @ W`` legalized, its kernel tagged with ``target``."""
    x = relax.Var("x", relax.TensorType((rows, 16), "float32"))
    params = [x]
    if weight_is_constant:
        w = relax.const(W)
    else:
        w = relax.Var("w", relax.TensorType((16, 32), "float32"))
        params.append(w)
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, w))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    return tvm.IRModule(
        {
            gv: f.with_attr("target", target) if isinstance(f, PrimFunc) else f
            for gv, f in mod.functions_items()
        }
    )


def _kernels(mod):
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, PrimFunc)}


@pytest.mark.parametrize("rows", [8, 1])  # 1: a batch-1 dense layer (dlight finds no I axis)
def test_weight_and_kernel_become_panels_and_numbers_stay(rows):
    nr = largest_divisor(32, 2 * vector_lanes(CPU, 32))
    before = _module(rows=rows)
    text = before.script()
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    assert before.script() == text  # the input is not mutated
    ((name, kernel),) = _kernels(after).items()
    assert name == "matmul_panels"
    shape = f"(T.int64({32 // nr}), T.int64(16), T.int64({nr}))"
    assert f"B: T.Buffer({shape}, " in kernel.script()
    packed = _constant_argument(after)
    np.testing.assert_array_equal(packed, W.reshape(16, 32 // nr, nr).transpose(1, 0, 2))
    # the rule reads the panels in place (no per-call pack) and computes the same numbers
    scheduled = schedule_kernels(after, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    assert (
        "_reindex = T.sblock_alloc_buffer" not in next(iter(_kernels(scheduled).values())).script()
    )
    x = np.random.default_rng(1).standard_normal((rows, 16)).astype("float32")
    got = relax.VirtualMachine(tvm.compile(scheduled, CPU), tvm.cpu())["main"](
        tvm.runtime.tensor(x)
    )
    np.testing.assert_allclose(got.numpy(), x @ W, rtol=1e-5, atol=1e-5)


def test_weights_that_are_not_constants_or_not_on_a_cpu_stay():
    for mod in (_module(weight_is_constant=False), _module(target=make_target("cuda"))):
        tvm.ir.assert_structural_equal(PackConstantWeights()(mod), mod)


def test_kernels_called_by_units_are_packed_too():
    """A deployment's kernels are called by its units, not by ``main``: ``x @ W`` moved into a
    function ``unit0`` that ``main`` calls gets its weight in panels all the same."""
    mod = _module()
    bb = relax.BlockBuilder(mod)
    unit_gv = bb.add_func(mod["main"].without_attr("global_symbol"), "unit0")
    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.Call(unit_gv, [x]))
        bb.emit_func_output(out)
    outer = bb.get()
    with tvm.transform.PassContext(instruments=[]):  # a hand-made two-function module
        after = PackConstantWeights()(outer)
    assert "matmul_panels" in _kernels(after)
    packed = _constant_argument(after, unit_gv.name_hint)
    assert packed.shape[1] == 16 and packed.ndim == 3


def _conv_module(width: int, channels: int = 32, target=CPU):
    """``relu(conv2d(x, V))`` 3x3 on a 5-row map ``width`` columns wide, legalized and fused,
    its kernel tagged for this CPU (``V`` constant)."""
    x = relax.Var("x", relax.TensorType((1, 16, 5, width), "float32"))
    weights = np.random.default_rng(2).standard_normal((channels, 16, 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, relax.const(weights), padding=1))
            out = bb.emit_output(relax.op.nn.relu(conv))
        bb.emit_func_output(out)
    return fused_kernels(bb.get(), target), weights


def _run(mod, x):
    exe = tvm.compile(schedule_kernels(mod, "rules"), CPU)
    return relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("width", [1, 3, 5])
def test_narrow_convolution_weights_are_packed_by_channel_and_numbers_stay(width):
    """Rows of 1-5 columns (a FlexPie column tile): the weights become ``[O / L, I, 3, 3, L]``
    and the convolution rule's channel-vectorized tile reads them, its accumulators laid out
    a vector of channels a position; outputs equal the unpacked build's."""
    lanes = vector_lanes(CPU, 32)
    before, weights = _conv_module(width)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    ((name, kernel),) = _kernels(after).items()
    assert name.endswith("_channels")
    shape = f"(T.int64({32 // lanes}), T.int64(16), T.int64(3), T.int64(3), T.int64({lanes}))"
    assert shape in kernel.script()
    packed = _constant_argument(after)
    expected = weights.reshape(32 // lanes, lanes, 16, 3, 3).transpose(0, 2, 3, 4, 1)
    np.testing.assert_array_equal(packed, expected)
    scheduled = schedule_kernels(after, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    (tiled,) = _kernels(scheduled).values()
    vector = rf"ff_\d in T.vectorized\(T.int64\({lanes}\)\)"  # a vector of channels
    assert re.search(vector, tiled.script()), tiled.script()
    accumulators = (
        f"(T.int64(1), T.int64({32 // lanes}), T.int64(5), T.int64({width}), T.int64({lanes}))"
    )
    assert f'T.sblock_alloc_buffer({accumulators}, scope="local")' in tiled.script()
    x = np.random.default_rng(3).standard_normal((1, 16, 5, width)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("mcpu", "tile"), [("znver3", ["5", "2"]), ("znver5", ["5", "1"])])
def test_a_channel_vectorized_tile_accumulates_at_most_112_floats(mcpu, tile):
    """A 5 x 4 row tile of 32 channels: 10 positions of 8 lanes on AVX2 (5 x 2), but 5 of 16
    on AVX-512 (5 x 1), where tiles of 8 or more vectors ran 14-20x slower (built only: the
    host may lack AVX-512)."""
    target = make_target({**cpu_device().target, "mcpu": mcpu})
    mod, _ = _conv_module(4, target=target)
    packed = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    (tiled,) = _kernels(schedule_kernels(packed, "rules")).values()
    lanes = vector_lanes(target, 32)
    assert f"ff_1 in T.vectorized(T.int64({lanes}))" in tiled.script()
    unrolled = re.findall(r"in T.unroll\(T.int64\((\d+)\)\)", tiled.script())
    # rows and columns unrolled where the tile is initialised, accumulated and written back
    # (a vector of channels at a time: its batch, rows and columns unrolled;
    # conv.CHANNEL_VECTOR_WRITE_BACK)
    assert unrolled == tile * 2 + ["1", *tile]


@pytest.mark.parametrize(
    ("mcpu", "width", "channels", "vectors"),
    [("znver4", 7, 64, 2), ("znver4", 7, 32, 2), ("znver4", 7, 48, 1), ("znver4", 1, 32, 1),
     ("znver3", 5, 64, 1)],
)  # fmt: skip
def test_with_avx512_a_channel_tile_computes_two_vectors_of_channels(
    mcpu, width, channels, vectors
):
    """With AVX-512 a channel-vectorized tile holds two vectors of output channels at each of
    its positions where 32 divide the channels and the parallel loop keeps two tasks a core
    (five 1 x 7 row tiles of 32 or 64 channels; not one 5 x 1 tile of 32 channels, 48
    channels, or AVX2's registers): two weight vectors a step, one broadcast input each
    (built only: the host may lack AVX-512)."""
    target = make_target({**cpu_device().target, "mcpu": mcpu, "num-cores": 2})
    mod, _ = _conv_module(width, channels, target=target)
    packed = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    (tiled,) = _kernels(schedule_kernels(packed, "rules")).values()
    text = tiled.script()
    lanes = vector_lanes(target, 32)
    vector = "ff_2" if vectors > 1 else "ff_1"
    assert f"for {vector} in T.vectorized(T.int64({lanes}))" in text
    assert ("for ff_1 in T.unroll(T.int64(2))" in text) == (vectors > 1)


@pytest.mark.skipif(vector_lanes(CPU, 32) < 16, reason="the two-vector tile needs AVX-512")
def test_a_two_vector_channel_tile_matches_the_unpacked_build():
    before, _ = _conv_module(7, 64, target=make_target({**cpu_device().target, "num-cores": 2}))
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    (tiled,) = _kernels(schedule_kernels(after, "rules")).values()
    assert "for ff_1 in T.unroll(T.int64(2))" in tiled.script()
    x = np.random.default_rng(4).standard_normal((1, 16, 5, 7)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)


def _constant_argument(mod, function: str = "main") -> np.ndarray:
    """The values of the one constant the first kernel call of ``function`` passes."""
    call = mod[function].body.blocks[0].bindings[0].value
    (constant,) = [f for f in call.args[1].fields if isinstance(f, Constant)]
    return constant.value.numpy()


def _grouped_module(channels: int, per_group: int, width: int, stride: int, target=CPU):
    """``relu(conv2d(x, V, groups))`` 3x3, ``per_group`` input and output channels a group, on
    a 6-row map ``width`` columns wide, legalized and fused for this CPU (``V`` constant)."""
    rng = np.random.default_rng(2)
    weights = rng.standard_normal((channels, per_group, 3, 3)).astype("float32")
    x = relax.Var("x", relax.TensorType((1, channels, 6, width), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(
                relax.op.nn.conv2d(x, relax.const(weights), stride, 1, groups=channels // per_group)
            )
            out = bb.emit_output(relax.op.nn.relu(conv))
        bb.emit_func_output(out)
    return fused_kernels(bb.get(), target)


@pytest.mark.parametrize(("width", "stride"), [(7, 1), (14, 2)])
def test_grouped_convolutions_whose_groups_the_lanes_divide_are_packed_by_channel(width, stride):
    """Groups of one vector of output channels (RegNet-X's 16, at any width and stride): the
    weights ``[O / L, I / G, 3, 3, L]``, a vector of one group's channels per broadcast input,
    outputs equal the unpacked build's."""
    lanes = vector_lanes(CPU, 32)
    before = _grouped_module(4 * lanes, lanes, width, stride)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    ((name, kernel),) = _kernels(after).items()
    assert name.endswith("_channels")
    shape = f"(T.int64(4), T.int64({lanes}), T.int64(3), T.int64(3), T.int64({lanes}))"
    assert shape in kernel.script()
    scheduled = schedule_kernels(after, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    (tiled,) = _kernels(scheduled).values()
    assert f"ff_1 in T.vectorized(T.int64({lanes}))" in tiled.script()
    x = np.random.default_rng(3).standard_normal((1, 4 * lanes, 6, width)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("width", "stride"), [(7, 1), (14, 2)])
def test_depthwise_convolutions_over_narrow_rows_read_vectors_of_channels(width, stride):
    """A depthwise 3x3 with rows of 7 output columns (a 7-wide map, a 14-wide one with stride
    2): the weights ``[C / L, 1, 3, 3, L]``; the rule's copy that pads the input writes it
    ``[N, C / L, H, W, L]``, a vector a position, inside the tile's loop nest; the accumulators are laid
    out as the tile holds them; outputs equal the unpacked build's."""
    lanes = vector_lanes(CPU, 32)
    before = _grouped_module(4 * lanes, 1, width, stride)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    ((name, kernel),) = _kernels(after).items()
    assert name.endswith("_channels")
    assert f"(T.int64(4), T.int64(1), T.int64(3), T.int64(3), T.int64({lanes}))" in kernel.script()
    weights = _constant_argument(before)
    expected = weights.reshape(4, lanes, 1, 3, 3).transpose(0, 2, 3, 4, 1)
    np.testing.assert_array_equal(_constant_argument(after), expected)
    scheduled = schedule_kernels(after, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:conv"}
    (tiled,) = _kernels(scheduled).values()
    text = tiled.script()
    padded = f"(T.int64(1), T.int64(4), T.int64(8), T.int64({width + 2}), T.int64({lanes}))"
    assert f"pad_temp = T.sblock_alloc_buffer({padded})" in text
    rows = 6 // stride
    accumulators = f"(T.int64(1), T.int64(4), T.int64({rows}), T.int64(7), T.int64({lanes}))"
    assert f'T.sblock_alloc_buffer({accumulators}, scope="local")' in text
    assert f"ff_1 in T.vectorized(T.int64({lanes}))" in text
    assert len(re.findall(r"^    for ", text, re.MULTILINE)) == 1  # the copy is in the tile's nest
    x = np.random.default_rng(3).standard_normal((1, 4 * lanes, 6, width)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("channels", "width"), [(32, 14), (32, 28), (12, 7)])
def test_depthwise_convolutions_over_wide_rows_or_part_vectors_stay(channels, width):
    """Rows wider than 7 columns with unit stride (the width-vectorized tile is as fast or
    faster there) and channels no vector divides keep their weights (AVX2's 8 lanes)."""
    avx2 = make_target({**cpu_device().target, "mcpu": "znver3"})
    mod = _grouped_module(channels, 1, width, 1, avx2)
    tvm.ir.assert_structural_equal(PackConstantWeights()(mod), mod)


def test_with_avx512_groups_of_8_channels_are_vectors_of_8():
    """RegNet-Y's groups of 8 channels with AVX-512's 16 lanes: 256-bit vectors of one group's
    channels (built only: the host may lack AVX-512)."""
    target = make_target({**cpu_device().target, "mcpu": "znver4"})
    mod = _grouped_module(48, 8, 14, 1, target)
    packed = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    ((name, kernel),) = _kernels(packed).items()
    assert name.endswith("_channels")
    assert "(T.int64(6), T.int64(8), T.int64(3), T.int64(3), T.int64(8))" in kernel.script()
    (tiled,) = _kernels(schedule_kernels(packed, "rules")).values()
    assert "ff_1 in T.vectorized(T.int64(8))" in tiled.script()


@pytest.mark.parametrize("on", [True, False])
def test_with_avx512_groups_of_two_vectors_take_the_one_group_tile(on):
    """ResNeSt's radix-2 groups in small: 2 groups of 32 channels with AVX-512's 16 lanes. With
    :data:`GROUP_TILES` each tile holds two vectors of one group's channels (14 accumulators:
    ``ff_1`` unrolled by 2 around the vector), as a one-group convolution's; off, one vector.
    Built for AVX-512 (the host may lack it); numbers on the host's own target equal the
    unpacked build's either way."""
    from unittest.mock import patch

    from tvm_hetero.schedules.cpu import conv

    target = make_target({**cpu_device().target, "mcpu": "znver4"})
    packed = relax.transform.DeadCodeElimination()(
        PackConstantWeights()(_grouped_module(64, 32, 14, 1, target))
    )
    with patch.object(conv, "GROUP_TILES", on):
        (tiled,) = _kernels(schedule_kernels(packed, "rules")).values()
        before = _grouped_module(64, 32, 14, 1)
        after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
        x = np.random.default_rng(5).standard_normal((1, 64, 6, 14)).astype("float32")
        np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)
    assert ("for ff_1 in T.unroll(T.int64(2))" in tiled.script()) == on, tiled.script()
    if on:  # the two vectors' lanes inside the unrolled pair
        assert "ff_2 in T.vectorized(T.int64(16))" in tiled.script(), tiled.script()


def test_groups_the_lanes_do_not_divide_stay():
    mod = _grouped_module(32, 4, 7, 1)  # ResNeXt's groups of 4 channels
    tvm.ir.assert_structural_equal(PackConstantWeights()(mod), mod)


@pytest.mark.parametrize(
    ("mcpu", "width", "channels", "packed"),
    [("znver4", 14, 32, True), ("znver4", 56, 32, True), ("znver4", 112, 32, False),
     ("znver4", 14, 16, False), ("znver3", 14, 32, False)],
)  # fmt: skip
def test_with_avx512_rows_up_to_56_wide_are_packed_by_channel(mcpu, width, channels, packed):
    """With 16 lanes a 3x3 convolution of two vectors of channels or more, rows up to 56 wide,
    gets the channel-vectorized tile; wider rows, one vector of channels and AVX2's 8 lanes
    keep the width-vectorized one (built only: the host may lack AVX-512)."""
    target = make_target({**cpu_device().target, "mcpu": mcpu})
    mod, _ = _conv_module(width, channels, target=target)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(mod))
    (name,) = _kernels(after)
    assert name.endswith("_channels") == packed, name


def test_stems_of_few_input_channels_and_1x1_windows_are_not_packed_by_channel():
    """A 3-channel image's first convolution and a 1x1 convolution stay as they were with
    AVX-512 (the stems ran slower by channel; a 1x1 window is the matmul rule's)."""
    target = make_target({**cpu_device().target, "mcpu": "znver4"})
    for in_channels, window in ((3, 3), (32, 1)):
        x = relax.Var("x", relax.TensorType((1, in_channels, 28, 28), "float32"))
        rng = np.random.default_rng(0)
        weights = rng.standard_normal((32, in_channels, window, window)).astype("float32")
        bb = relax.BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                out = bb.emit_output(relax.op.nn.conv2d(x, relax.const(weights), 2, window // 2))
            bb.emit_func_output(out)
        mod = fused_kernels(bb.get(), target)
        (name,) = _kernels(relax.transform.DeadCodeElimination()(PackConstantWeights()(mod)))
        assert not name.endswith("_channels"), name


def test_wide_convolutions_and_channels_the_vector_does_not_divide_stay():
    avx2 = make_target({**cpu_device().target, "mcpu": "znver3"})  # AVX-512 packs rows of 16
    for mod, _ in (_conv_module(16, target=avx2), _conv_module(3, channels=12)):
        tvm.ir.assert_structural_equal(PackConstantWeights()(mod), mod)


def test_symbolic_rows_still_get_panels_and_a_symbolic_width_none():
    """A batch given at run time (``n`` rows) was an ``int()`` of a shape variable (a symbolic
    batch transformers export failed to compile); the panels need whole columns only."""
    from tvm.script import ir as I
    from tvm.script import relax as R

    from tvm_hetero.passes.pack_constant_weights import packed_kernel

    @I.ir_module
    class Rows:
        @R.function
        def main(x: R.Tensor(("n", 64), "float32"), w: R.Tensor((64, 64), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                R.output(y)
            return y

    @I.ir_module
    class Width:
        @R.function
        def main(x: R.Tensor((4, 64), "float32"), w: R.Tensor((64, "m"), "float32")):
            with R.dataflow():
                y = R.matmul(x, w)
                R.output(y)
            return y

    target = tvm.target.Target("llvm")

    def kernel(mod):
        (func,) = [
            f for _, f in fused_kernels(mod, target).functions_items() if isinstance(f, PrimFunc)
        ]
        return func

    packing = packed_kernel(kernel(Rows))
    assert packing is not None and packing.suffix == "panels"
    assert packed_kernel(kernel(Width)) is None


def test_a_pointwise_head_over_a_1x1_map_gets_panels_the_matmul_rule_reads_in_place():
    """A 1x1 convolution over a 1x1 map (GhostNet's and MobileNet v3's head after global
    pooling) is the matmul rule's, its output channels the columns: the weights become its
    ``[O / NR, I, NR]`` panels. Packed by channel as a narrow convolution, they were repacked
    into panels on every call (a third of GhostNet's time); numbers equal the unpacked build's."""
    x = relax.Var("x", relax.TensorType((1, 96, 1, 1), "float32"))
    weights = np.random.default_rng(4).standard_normal((128, 96, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(relax.op.nn.conv2d(x, relax.const(weights))))
        bb.emit_func_output(out)
    before = fused_kernels(bb.get(), CPU)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    ((name, _),) = _kernels(after).items()
    assert name.endswith("_panels"), name
    nr = largest_divisor(128, 2 * vector_lanes(CPU, 32))
    packed = _constant_argument(after)
    np.testing.assert_array_equal(packed, weights[:, :, 0, 0].reshape(128 // nr, nr, 96)
                                  .transpose(0, 2, 1))  # fmt: skip
    scheduled = schedule_kernels(after, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    (kernel,) = _kernels(scheduled).values()
    assert "_reindex = T.sblock_alloc_buffer" not in kernel.script()  # no pack per call
    x = np.random.default_rng(5).standard_normal((1, 96, 1, 1)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)


def _pointwise_module(channels: int, side: int, outputs: int = 64, target=CPU):
    """``conv2d(x, V)`` 1x1 over a ``side`` x ``side`` map, fused, tagged for ``target``."""
    x = relax.Var("x", relax.TensorType((1, channels, side, side), "float32"))
    weights = np.random.default_rng(6).standard_normal((outputs, channels, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, relax.const(weights)))
        bb.emit_func_output(out)
    return fused_kernels(bb.get(), target), weights


@pytest.mark.parametrize("side", [7, 14])
def test_a_pointwise_convolution_over_a_small_map_takes_its_weights_as_columns(side):
    """Over a 14 x 14 map (196 positions: no whole vector of AVX2 or AVX-512 divides them, a
    tile of 4 rows does) or a 7 x 7 one (49: AVX-512's 7-row tiles divide them, AVX2's rows
    are padded to 52, :data:`PADDED_ROWS_MAX_POSITIONS`) the output channels are the matmul
    rule's columns: the weights become ``[O / NR, I, NR]`` panels and the kernel names them as
    ``B``; the rule reads the weights in place and the image too, but where its rows are padded
    (then copied a call), its tile runs along the output channels, and the numbers equal the
    unpacked build's."""
    nr = panel_width(CPU, 32, 64)
    panels = 64 // nr

    @T.prim_func(private=True, s_tir=True)
    def expected(
        x: T.Buffer((T.int64(1), T.int64(8), T.int64(side), T.int64(side)), "float32"),
        B: T.Buffer((T.int64(panels), T.int64(8), T.int64(nr)), "float32"),
        conv2d_nchw: T.Buffer((T.int64(1), T.int64(64), T.int64(side), T.int64(side)), "float32"),
    ):
        T.func_attr({"op_pattern": 4, "target": CPU, "tirx.noalias": True,
                     "tvm_hetero.columns_operand": 1})  # fmt: skip
        pad_temp = T.sblock_alloc_buffer((T.int64(1), T.int64(8), T.int64(side), T.int64(side)))
        for i0, i1, i2, i3 in T.grid(T.int64(1), T.int64(8), T.int64(side), T.int64(side)):
            with T.sblock("pad_temp"):
                v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
                pad_temp[v_i0, v_i1, v_i2, v_i3] = x[v_i0, v_i1, v_i2, v_i3]
        for a0, a1, a2, a3, a4 in T.grid(
            T.int64(1), T.int64(64), T.int64(side), T.int64(side), T.int64(8)
        ):
            with T.sblock("conv2d_nchw"):
                v0, v1, v2, v3, v4 = T.axis.remap("SSSSR", [a0, a1, a2, a3, a4])
                with T.init():
                    conv2d_nchw[v0, v1, v2, v3] = T.float32(0.0)
                conv2d_nchw[v0, v1, v2, v3] = (
                    conv2d_nchw[v0, v1, v2, v3]
                    + pad_temp[v0, v4, v2, v3] * B[v1 // T.int64(nr), v4, v1 % T.int64(nr)]
                )

    before, weights = _pointwise_module(8, side)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    ((name, kernel),) = _kernels(after).items()
    assert name.endswith("_panels"), name
    tvm.ir.assert_structural_equal(kernel, expected)
    packed = _constant_argument(after)
    np.testing.assert_array_equal(packed, weights[:, :, 0, 0].reshape(panels, nr, 8)
                                  .transpose(0, 2, 1))  # fmt: skip
    scheduled = schedule_kernels(after, "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    text = next(iter(_kernels(scheduled).values())).script()
    assert "_reindex = T.sblock_alloc_buffer" not in text  # no operand packed as it is
    rows = padded_row_count(side * side, rows_per_tile(CPU))
    local = f'(T.int64(1), T.int64({rows}), T.int64(64)), scope="local"'  # [batch, I, J]
    assert local in text
    assert ("pad_temp_reindex_pad = T.sblock_alloc_buffer" in text) == (rows != side * side)
    x = np.random.default_rng(7).standard_normal((1, 8, side, side)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("depth", "row_tiles", "block"),
    [(1024, 28, 128), (2048, 7, 128), (576, 14, 96), (256, 28, 128), (96, 7, None),
     (1024, 1, None), (1031, 7, None)],
)  # fmt: skip
def test_a_deep_panel_read_by_several_row_tiles_is_cut_in_blocks_of_16_kib(depth, row_tiles, block):
    """Panels of 32 floats a row: blocks of at most 128 rows, a divisor of the depth and at
    least 32 rows (a prime depth has none); a panel of 16 KiB or less (96 rows), or one row
    tile, stays whole."""
    assert depth_block(depth, depth * 32 * 4, row_tiles) == block


def test_a_deep_pointwise_convolution_over_a_small_map_sums_its_depth_in_blocks():
    """512 -> 64 channels over 7 x 7, the weights as the columns: each 64 KiB panel is summed
    in 4 blocks of 128 input channels, each block over the panel's 7 row tiles (marked for
    the next block's prefetch); the panel's 49 x 32 partial sums are initialised before the
    first block and written back after the last, a row tile at a time, an output channel at a
    time, a vector of the tile's 7 positions each (built for AVX-512: the host may lack it);
    numbers equal the unpacked build's on this CPU, whichever tile it takes."""
    avx512 = make_target({**cpu_device().target, "mcpu": "znver4", "num-cores": 2})
    packed = PackConstantWeights()(_pointwise_module(512, 7, target=avx512)[0])
    scheduled = schedule_kernels(relax.transform.DeadCodeElimination()(packed), "rules")
    assert {c.label for c in kernel_choices(scheduled)} == {"rule:matmul"}
    text = next(iter(_kernels(scheduled).values())).script()
    grid = (  # the row tiles marked for the next block's prefetch (PrefetchPanelBlocks)
        r"for \w+ in range\(T.int64\(4\)\):\s+for \w+ in T.serial\(T.int64\(7\), "
        r"annotations=\{\"tvm_hetero.prefetch_panel_block\": \[\"B\", 128\]\}\):\s+"
        r"for \w+ in range\(T.int64\(128\)\)"
    )
    assert re.search(grid, text), text
    init = r"_init in range\(T.int64\(7\)\)"
    back = (
        r"T.grid\(T.int64\(1\), T.int64\(7\)\):\s+for \w+ in T.unroll\(T.int64\(32\)\):\s+"
        r"for \w+ in T.vectorized\(T.int64\(7\)\)"
    )
    assert re.search(init, text) and re.search(back, text)
    assert "in T.vectorized(T.int64(32))" in text
    before, _ = _pointwise_module(512, 7)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    x = np.random.default_rng(8).standard_normal((1, 512, 7, 7)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("inputs", "outputs", "columns"), [(64, 64, True), (32, 64, False), (64, 48, False)]
)
def test_with_avx512_a_28_by_28_map_takes_the_weights_as_columns_for_a_wider_tile(
    inputs, outputs, columns
):
    """784 positions make one vector of 16 columns; 64 output channels make two, so with 64
    input channels the weights are the columns, the tile 8 positions x 32 channels, written
    back a channel at a time in vectors of 8 positions; with 32 input channels (the write-back
    outweighs) or 48 outputs (one vector too) the image stays the columns (built for AVX-512:
    the host may lack it). Numbers equal the unpacked build's on this CPU."""
    avx512 = make_target({**cpu_device().target, "mcpu": "znver4", "num-cores": 2})
    packed = PackConstantWeights()(_pointwise_module(inputs, 28, outputs, target=avx512)[0])
    packed = relax.transform.DeadCodeElimination()(packed)
    ((name, kernel),) = _kernels(packed).items()
    assert ("tvm_hetero.columns_operand" in kernel.attrs) == columns, name
    if columns:
        scheduled = schedule_kernels(packed, "rules")
        text = next(iter(_kernels(scheduled).values())).script()
        assert '(T.int64(1), T.int64(784), T.int64(64)), scope="local"' in text  # [batch, I, J]
        back = r"for \w+ in T.unroll\(T.int64\(32\)\):\s+for \w+ in T.vectorized\(T.int64\(8\)\)"
        assert re.search(back, text), text
    before, _ = _pointwise_module(inputs, 28, outputs)
    after = relax.transform.DeadCodeElimination()(PackConstantWeights()(before))
    x = np.random.default_rng(9).standard_normal((1, inputs, 28, 28)).astype("float32")
    np.testing.assert_allclose(_run(after, x), _run(before, x), rtol=1e-4, atol=1e-4)


def test_with_avx2_a_7_by_7_map_pads_its_rows_and_takes_the_weights_as_columns():
    """AVX2's 4-row tiles pad a 7 x 7 map's 49 positions to 52 rows; up to
    ``PADDED_ROWS_MAX_POSITIONS`` that still makes the output channels the columns (built for
    AVX2: the host may have AVX-512, whose 7-row tiles need no padding)."""
    avx2 = make_target({**cpu_device().target, "mcpu": "znver3", "num-cores": 2})
    packed = PackConstantWeights()(_pointwise_module(8, 7, target=avx2)[0])
    ((name, kernel),) = _kernels(relax.transform.DeadCodeElimination()(packed)).items()
    assert "tvm_hetero.columns_operand" in kernel.attrs, name


@pytest.mark.parametrize(
    ("side", "mcpu"), [(28, None), (27, None), (13, "znver3")]
)  # 784: whole vectors; 729: larger; 169: no tile of 4 (AVX2's registers hold no 13 rows)
def test_pointwise_convolutions_over_larger_maps_keep_the_image_as_columns(side, mcpu):
    target = CPU if mcpu is None else make_target({**cpu_device().target, "mcpu": mcpu})
    before, _ = _pointwise_module(8, side, target=target)
    tvm.ir.assert_structural_equal(PackConstantWeights()(before), before)


def test_a_13_by_13_map_takes_its_channels_as_columns_where_avx512_holds_13_rows():
    """169 positions: tiles of 13 rows with AVX-512's 32 registers (``matmul.tall_rows``), so
    the weights are packed as the columns' panels (two of 32 channels) and named ``B``."""
    target = make_target({**cpu_device().target, "mcpu": "skylake-avx512"})
    before, _ = _pointwise_module(8, 13, target=target)
    text = PackConstantWeights()(before).script()
    assert '"tvm_hetero.columns_operand": 1' in text, text
    assert "T.Buffer((T.int64(2), T.int64(8), T.int64(32))" in text, text


def test_a_pointwise_convolution_over_a_map_of_symbolic_height_stays():
    """A height given at run time: no size to weigh, the kernel stays (the map's positions were
    read as integers and the pass failed)."""
    height = tvm.tirx.Var("h", "int64")
    x = relax.Var("x", relax.TensorType((1, 8, height, 7), "float32"))
    weights = np.ones((64, 8, 1, 1), "float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv2d(x, relax.const(weights)))
        bb.emit_func_output(out)
    before = fused_kernels(bb.get(), CPU)
    tvm.ir.assert_structural_equal(PackConstantWeights()(before), before)
