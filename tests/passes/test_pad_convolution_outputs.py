"""PadConvolutionOutputs: CPU convolutions computed over an output their tile divides, cropped."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.passes import PadConvolutionOutputs
from tvm_hetero.schedules.cpu import conv
from tvm_hetero.schedules.cpu.conv import (
    channel_tile_width,
    computed_rows,
    register_tile,
    vector_width,
)

HASWELL = {"kind": "llvm", "mcpu": "haswell"}  # 8 lanes of float32
ZEN4 = {"kind": "llvm", "mcpu": "znver4"}  # 16 lanes of float32
CUDA = {"kind": "cuda", "arch": "sm_80"}


@pytest.mark.parametrize(
    ("width", "expected"),
    [(13, (16, 8)), (27, (32, 8)), (55, (56, 8)), (111, (112, 8)), (28, (32, 8)), (56, (56, 8)),
     (7, (8, 8)), (4, (8, 8)), (3, (3, 3))],
)  # fmt: skip
def test_vector_width_rounds_up_to_whole_vectors(width, expected):
    assert vector_width(width, 8) == expected


@pytest.mark.parametrize(
    ("width", "expected"),
    [(7, (8, 8)), (8, (8, 8)), (4, (8, 8)), (9, (16, 16)), (17, (32, 16)), (56, (64, 16))],
)
def test_avx512_rows_of_at_most_half_a_vector_take_vectors_of_8(width, expected):
    assert vector_width(width, 16) == expected


@pytest.mark.parametrize(
    ("width", "expected"),
    [(13, (14, 7)), (27, (28, 7)), (55, (56, 8)), (28, (28, 7)), (10, (10, 5)), (3, (3, 3))],
)
def test_gathered_vector_width_takes_the_fewest_vectors_per_row(width, expected):
    assert vector_width(width, 8, gathered=True) == expected


@pytest.mark.parametrize(
    ("rows", "vectors", "channels", "expected"),
    [(7, 1, 512, 8), (147, 19, 64, 148), (71, 9, 192, 72), (35, 5, 96, 36), (5, 1, 64, 5),
     (7, 2, 64, 7), (56, 7, 64, 56), (7, 1, 6, 7)],
)  # fmt: skip
def test_odd_rows_of_odd_vectors_are_computed_one_row_taller(rows, vectors, channels, expected):
    """From 7 rows, where both the rows and the vectors are odd and the channels take the 4 x 2
    tile; then the rule tiles two rows, not one vector of one row."""
    assert computed_rows(rows, vectors, channels) == expected
    if expected != rows:
        assert register_tile(channels, rows, vectors) == (8, 1, 1)
        assert register_tile(channels, expected, vectors) == (4, 2, 1)


def _conv_module(width_in, stride, device=HASWELL, layout="NCHW", kernel=3, groups=1):
    shape = (1, 4, width_in, width_in) if layout == "NCHW" else (1, width_in, width_in, 4)
    wshape = (8, 4 // groups, kernel, kernel) if layout == "NCHW" else (kernel, kernel, 4, 8)
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType(shape, "float32", vdev))
    w = relax.Var("w", relax.TensorType(wshape, "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            kernel_layout = "OIHW" if layout == "NCHW" else "HWIO"
            y = bb.emit_output(relax.op.nn.conv2d(x, w, stride, kernel // 2, groups=groups,
                                                  data_layout=layout,
                                                  kernel_layout=kernel_layout))  # fmt: skip
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod


def test_a_13_wide_convolution_is_computed_16_wide_and_cropped():
    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(HASWELL, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 4, 13, 13), "float32", "llvm:0"),
            w: R.Tensor((8, 4, 3, 3), "float32", "llvm:0"),
        ) -> R.Tensor((1, 8, 13, 13), "float32", "llvm:0"):
            with R.dataflow():
                wide = R.nn.conv2d(x, w, strides=[1, 1], padding=[1, 1, 1, 4])
                y = R.strided_slice(wide, axes=[3], begin=[0], end=[13])
                R.output(y)
            return y

    before = _conv_module(13, 1)
    text = before.script()
    after = PadConvolutionOutputs()(before)
    assert before.script() == text  # the input is not mutated
    tvm.ir.assert_structural_equal(after["main"], Expected["main"])


def test_a_7_by_7_convolution_is_computed_8_by_8_and_cropped_both_ways():
    """7 rows of one vector: one more row too, so the rule tiles two rows of it."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(HASWELL, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 4, 7, 7), "float32", "llvm:0"),
            w: R.Tensor((8, 4, 3, 3), "float32", "llvm:0"),
        ) -> R.Tensor((1, 8, 7, 7), "float32", "llvm:0"):
            with R.dataflow():
                wide = R.nn.conv2d(x, w, strides=[1, 1], padding=[1, 1, 2, 2])
                y = R.strided_slice(wide, axes=[2, 3], begin=[0, 0], end=[7, 7])
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(PadConvolutionOutputs()(_conv_module(7, 1))["main"],
                                   Expected["main"])  # fmt: skip


@pytest.mark.parametrize(("width_in", "groups", "rows"), [(5, 1, 5), (13, 1, 13), (7, 2, 7)])
def test_rows_stay_below_7_with_even_vectors_and_in_grouped_convolutions(width_in, groups, rows):
    """5 rows (a fifth more work for the tile), 13 rows of 2 vectors (the rule tiles 2 vectors
    of a row already) and a grouped convolution (no channel tile across groups) keep their
    rows; their widths still grow to whole vectors."""
    (wide, crop) = (
        PadConvolutionOutputs()(_conv_module(width_in, 1, groups=groups))["main"]
        .body.blocks[0]
        .bindings
    )
    assert int(wide.var.ty.shape.values[2]) == rows
    assert int(wide.var.ty.shape.values[3]) == -(-width_in // 8) * 8
    assert [int(d) for d in crop.var.ty.shape.values[2:]] == [width_in, width_in]


def test_strided_convolutions_get_stride_times_the_extra_rows():
    after = PadConvolutionOutputs()(_conv_module(13, 2))  # 7 x 7, computed 8 x 8
    (wide, crop) = after["main"].body.blocks[0].bindings
    assert [int(p) for p in wide.value.attrs.padding] == [1, 1, 1 + 2, 1 + 2 + 1]
    assert [int(d) for d in crop.var.ty.shape.values] == [1, 8, 7, 7]


def test_strided_convolutions_get_stride_times_the_extra_columns():
    after = PadConvolutionOutputs()(_conv_module(25, 2))  # 13 wide, widened to 16
    (wide, crop) = after["main"].body.blocks[0].bindings
    # and one column more: 34 padded columns, two whole phases of 17 (the rule lays them out so)
    assert [int(p) for p in wide.value.attrs.padding] == [1, 1, 1, 1 + 2 * 3 + 1]
    assert [int(d) for d in wide.var.ty.shape.values] == [1, 8, 13, 16]
    assert [int(d) for d in crop.var.ty.shape.values] == [1, 8, 13, 13]


def test_a_strided_input_of_odd_padded_width_gets_a_column_for_its_phases_and_no_crop():
    """16 output columns of stride 2 read 33 padded columns, which the rule cannot lay out by
    phase (it gathered every lane, and tiled one vector of one row); a 34th, never read, makes
    two phases of 17, and the output is as it was (no crop)."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(HASWELL, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 4, 31, 31), "float32", "llvm:0"),
            w: R.Tensor((8, 4, 3, 3), "float32", "llvm:0"),
        ) -> R.Tensor((1, 8, 16, 16), "float32", "llvm:0"):
            with R.dataflow():
                y = R.nn.conv2d(x, w, strides=[2, 2], padding=[1, 1, 1, 2])
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(PadConvolutionOutputs()(_conv_module(31, 2))["main"],
                                   Expected["main"])  # fmt: skip


@pytest.mark.parametrize(
    ("width_in", "device", "layout"),
    [(16, HASWELL, "NCHW"), (13, CUDA, "NCHW"), (13, HASWELL, "NHWC")],
    ids=["good_width", "cuda_vdevice", "nhwc"],
)
def test_good_widths_gpu_and_other_layouts_stay(width_in, device, layout):
    mod = _conv_module(width_in, 1, device, layout)
    tvm.ir.assert_structural_equal(PadConvolutionOutputs()(mod), mod)


@pytest.mark.parametrize(("stride", "widened"), [(1, False), (2, True)])
def test_pointwise_convolutions_are_left_to_the_matmul_rule(stride, widened):
    """A 1x1 convolution with stride 1 is weights x image; a strided one is a convolution."""
    mod = _conv_module(13 * stride, stride, kernel=1)
    assert ("strided_slice" in PadConvolutionOutputs()(mod).script()) == widened


@pytest.mark.parametrize(
    ("width_in", "stride"), [(13, 1), (25, 2), (55, 1), (7, 1), (13, 2), (31, 2)]
)
def test_numbers_match_the_unpadded_convolution(width_in, stride):
    mod = _conv_module(width_in, stride)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal([int(d) for d in p.ty.shape.values]).astype("float32")
            for p in mod["main"].params]  # fmt: skip

    def run(m):
        m = tvm.IRModule({"main": m["main"]})  # plain CPU build of the same function
        m = relax.transform.LegalizeOps()(m)
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()

    after = PadConvolutionOutputs()(mod)
    assert "strided_slice" in after.script() or width_in == 31
    np.testing.assert_allclose(run(after), run(mod), rtol=1e-5, atol=1e-5)


def test_tensors_without_a_vdevice_are_on_the_home_device():
    """A single-device module's tensors carry no vdevice: the first declared one is theirs."""
    mod = _conv_module(13, 1)
    bare = relax.Var("x", relax.TensorType((1, 4, 13, 13), "float32"))
    w = relax.Var("w", relax.TensorType((8, 4, 3, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [bare, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(bare, w, 1, 1))
        bb.emit_func_output(y)
    plain = bb.get()
    plain.update_global_info("vdevice", list(mod.global_infos["vdevice"]))
    assert "strided_slice" in PadConvolutionOutputs()(plain).script()


def test_narrow_convolutions_with_constant_weights_keep_their_width():
    """A 4-wide convolution whose weights are constants gets the channel-vectorized tile
    (weights packed by ``PackConstantWeights``): it is not widened; with weights given at run
    time it is, to 8."""
    vdev = VDevice(make_target(HASWELL), 0, "global")
    x = relax.Var("x", relax.TensorType((1, 4, 4, 4), "float32", vdev))
    weights = np.ones((8, 4, 3, 3), "float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, relax.const(weights), padding=1))
        bb.emit_func_output(y)
    constant = bb.get()
    constant.update_global_info("vdevice", [vdev])
    tvm.ir.assert_structural_equal(PadConvolutionOutputs()(constant), constant)
    (wide, _) = PadConvolutionOutputs()(_conv_module(4, 1))["main"].body.blocks[0].bindings
    assert int(wide.var.ty.shape.values[3]) == 8


def test_weights_bound_to_a_variable_first_count_as_constants():
    """A unit's weights off the home device reach the pass bound to a variable (the copy that
    ``device_module`` dropped left ``w = const``): a 4-wide convolution on them keeps its width,
    as one reading the constant itself."""
    vdev = VDevice(make_target(HASWELL), 0, "global")
    x = relax.Var("x", relax.TensorType((1, 4, 4, 4), "float32", vdev))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            w = bb.emit(relax.const(np.ones((8, 4, 3, 3), "float32")), "w")
            y = bb.emit_output(relax.op.nn.conv2d(x, w, padding=1))
        bb.emit_func_output(y)
    bound = bb.get()
    bound.update_global_info("vdevice", [vdev])
    tvm.ir.assert_structural_equal(PadConvolutionOutputs()(bound), bound)


def test_column_tiles_off_home_get_packed_weights_in_a_deployment():
    """Each device's library of a column-tiled convolution (4 columns a tile) vectorizes it by
    channel, the home device's and the other's alike (before, the other device's weights came
    bound to a variable, so its tile was widened to whole vectors and not packed: 2x the
    work), and the deployment's numbers equal the whole model's."""
    from tvm_hetero import api
    from tvm_hetero.build.deploy import device_module
    from tvm_hetero.build.multi_device import lower
    from tvm_hetero.devices import cpu_device
    from tvm_hetero.frontends.model import InputSpec, Model
    from tvm_hetero.pipelines import get_pipeline
    from tvm_hetero.plan.spatial_plan import SpatialPlan

    rng = np.random.default_rng(0)
    x = relax.Var("x", relax.TensorType((1, 16, 6, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            weights = relax.const(rng.standard_normal((32, 16, 3, 3)).astype("float32"))
            y = bb.emit_output(relax.op.nn.conv2d(x, weights, padding=1), "y")
        bb.emit_func_output(y)
    model = Model("columns", bb.get(), (InputSpec("x", (1, 16, 6, 8), "float32"),), "test")
    devices = [cpu_device(0, threads=1), cpu_device(1, threads=1)]
    plan = SpatialPlan(tuple(d.name for d in devices), (("y",),), ("InW",))
    outlined = get_pipeline("device_units")(api.place(model, devices, plan))
    vdevices = list(outlined.global_infos["vdevice"])
    for k in (0, 1):
        names = [
            gv.name_hint
            for gv, _ in lower(device_module(outlined, k, vdevices[k])).functions_items()
        ]
        convs = [n for n in names if "conv2d" in n]
        assert convs and all(n.endswith("_channels") for n in convs), (k, names)
    inputs = model.random_inputs()
    got = api.run(api.compile(model, devices, plan), inputs)
    np.testing.assert_allclose(got[0], api.reference_outputs(model, inputs, devices[0])[0],
                               rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize(
    ("width", "channels", "lanes", "inputs", "rows", "expected"),
    [(13, 192, 16, 48, 13, 14), (27, 128, 16, 32, 27, 28), (55, 64, 16, 16, 55, 56),
     (17, 192, 16, 192, 17, 18), (56, 64, 16, 64, 56, 56), (35, 96, 16, 96, 35, 35),
     (8, 64, 16, 64, 8, None), (16, 64, 16, 64, 16, None), (23, 64, 16, 64, 23, 24),
     (7, 64, 16, 64, 1, 7), (55, 64, 16, 8, 55, None),
     (13, 24, 16, 48, 13, None), (13, 64, 8, 48, 13, None), (57, 64, 16, 64, 57, None)],
)  # fmt: skip
def test_channel_tile_width_pads_a_few_columns_for_the_wide_channel_tile(
    width, channels, lanes, inputs, rows, expected
):
    """AVX-512 only, a vector of input channels and two of output channels, a quarter more
    columns at most, up to 56 wide; where a tile of 7 positions is that near, the narrowest
    width a tile of 6 fits (one accumulator spare: 17 at 18, not 21; 23 at 24, not 28); none
    where no tile of 7 is (8 would need 14: not 9 in tiles of 2 x 3; 16 not 18)."""
    assert channel_tile_width(width, channels, lanes, inputs, rows) == expected


@pytest.mark.parametrize(("spare", "expected"), [(0, 21), (1, 18)])
def test_a_spare_accumulator_computes_17_columns_18_wide(spare, expected, monkeypatch):
    monkeypatch.setattr(conv, "SPARE_ACCUMULATORS", spare)
    assert channel_tile_width(17, 192, 16, 192, 17) == expected


def _constant_conv(width: int, device=ZEN4, groups: int = 1):
    vdev = VDevice(make_target(device), 0, "global")
    x = relax.Var("x", relax.TensorType((1, 16, width, width), "float32", vdev))
    weights = np.random.default_rng(0).standard_normal((32, 16 // groups, 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(
                relax.op.nn.conv2d(x, relax.const(weights), padding=1, groups=groups)
            )
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return mod, weights


@pytest.mark.parametrize(("width", "wide"), [(13, 14), (17, 18)])
def test_constant_weights_on_avx512_are_computed_a_few_columns_wider_for_the_channel_tile(
    width, wide
):
    """13 columns become 14, 17 become 18 (tiles of 6, an accumulator spare, not 21), the
    width ``channel_tile_width`` gives (not whole vectors), rows unchanged; the numbers are the
    unpadded convolution's."""
    mod, weights = _constant_conv(width)
    extra = 1 + wide - width

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice(ZEN4, 0)]})

        @R.function
        def main(
            x: R.Tensor((1, 16, width, width), "float32", "llvm:0"),
        ) -> R.Tensor((1, 32, width, width), "float32", "llvm:0"):
            with R.dataflow():
                wide = R.nn.conv2d(x, R.const(weights), strides=[1, 1], padding=[1, 1, 1, extra])
                y = R.strided_slice(wide, axes=[3], begin=[0], end=[width])
                R.output(y)
            return y

    after = PadConvolutionOutputs()(mod)
    tvm.ir.assert_structural_equal(after["main"], Expected["main"], map_free_vars=True)
    x = np.random.default_rng(1).standard_normal((1, 16, width, width)).astype("float32")

    def run(m):
        m = relax.transform.LegalizeOps()(tvm.IRModule({"main": m["main"]}))
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    np.testing.assert_allclose(run(after), run(mod), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("device", "groups"), [(HASWELL, 1), (ZEN4, 8)])
def test_avx2_and_grouped_convolutions_keep_whole_vectors(device, groups):
    """Groups of 4 channels: no channel vector shares its inputs."""
    body = PadConvolutionOutputs()(_constant_conv(13, device, groups)[0])["main"].body
    (wide, _) = body.blocks[0].bindings
    assert int(wide.var.ty.shape.values[3]) == 16


@pytest.mark.parametrize(
    ("width", "stride", "widened"),
    [(7, 1, None), (13, 1, 16), (27, 2, None), (56, 2, 32), (140, 5, None)],
)
def test_depthwise_convolutions_the_channel_tile_takes_keep_their_width(width, stride, widened):
    """A depthwise 3x3 of 16 channels (two AVX2 vectors) with constant weights gets the
    channel-vectorized tile over rows of up to 7 output columns, 14 with a stride: not widened
    (7, and 27 with stride 2: 14); 13 columns with unit stride are widened to 16; 28 columns of
    stride 2 are widened to 32, whole vectors of 8, as unit-stride ones are
    (``StridedLoadsAsShuffles`` reads them as whole vectors and a permute); 28 of stride 5, read
    lane by lane, keep their width (four vectors of 7, as many as 32 would take)."""
    vdev = VDevice(make_target(HASWELL), 0, "global")
    x = relax.Var("x", relax.TensorType((1, 16, 8, width), "float32", vdev))
    weights = np.random.default_rng(0).standard_normal((16, 1, 3, 3)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(x, relax.const(weights), stride, padding=1, groups=16)
            y = bb.emit_output(conv)
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    after = PadConvolutionOutputs()(mod)
    if widened is None:
        tvm.ir.assert_structural_equal(after, mod)
        return
    (wide, _) = after["main"].body.blocks[0].bindings
    assert int(wide.var.ty.shape.values[3]) == widened
    x_value = np.random.default_rng(1).standard_normal((1, 16, 8, width)).astype("float32")

    def run(m):
        m = relax.transform.LegalizeOps()(tvm.IRModule({"main": m["main"]}))
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x_value)).numpy()

    np.testing.assert_allclose(run(after), run(mod), rtol=1e-5, atol=1e-5)


def test_a_1x7_convolution_over_17_columns_runs_18_wide_in_channel_tiles_and_equals_numpy():
    """Inception's 1x7 over 17 x 17, built whole for Zen 4: one ``_channels`` kernel whose
    register tile is 6 positions of two channel vectors (an accumulator spare), over 18
    columns; run where this host has AVX-512, the numbers are the convolution's."""
    from tvm_hetero.build.multi_device import build_lowered, lower
    from tvm_hetero.schedules import kernel_choices

    vdev = VDevice(make_target(ZEN4), 0, "global")
    x = relax.Var("x", relax.TensorType((1, 32, 17, 17), "float32", vdev))
    weights = np.random.default_rng(0).standard_normal((32, 32, 1, 7)).astype("float32")
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, relax.const(weights), padding=[0, 3]))
        bb.emit_func_output(y)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    lowered = lower(mod)
    (choice,) = kernel_choices(lowered)
    assert choice.kernel.endswith("_channels") and choice.rule == "conv", choice
    text = lowered[choice.kernel].script()
    assert "T.int64(18)" in text and "T.int64(21)" not in text
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        if "avx512f" not in info.read():
            return
    data = np.random.default_rng(1).standard_normal((1, 32, 17, 17)).astype("float32")
    vm = relax.VirtualMachine(build_lowered(lowered), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(data)).numpy()
    padded = np.pad(data, ((0, 0), (0, 0), (0, 0), (3, 3)))
    want = sum(
        np.einsum("oi,nihw->nohw", weights[:, :, 0, k], padded[..., k : k + 17]) for k in range(7)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
