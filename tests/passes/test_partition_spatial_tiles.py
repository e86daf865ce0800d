"""PartitionSpatialTiles: exact IR (Before/Expected) and equal numbers for every scheme and mode."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_hetero import api
from tvm_hetero._compat import TensorType
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends.model import InputSpec, Model
from tvm_hetero.ir.bindings import op_bindings
from tvm_hetero.ir.opgraph import OpGraph
from tvm_hetero.passes import PlaceOperators
from tvm_hetero.passes.partition_spatial_tiles import PartitionSpatialTiles
from tvm_hetero.plan.spatial_plan import SpatialPlan
from tvm_hetero.strategies.edgepipe.planner import pipeline_layers
from tvm_hetero.zoo import load_zoo_model


@I.ir_module
class ConvChain:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((1, 2, 6, 6), "float32"), w: R.Tensor((2, 2, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            z = R.nn.relu(y)
            o = R.nn.conv2d(z, w, padding=[1, 1, 1, 1])
            R.output(o)
        return o


def test_a_fused_run_computes_its_halo_and_the_next_segment_exchanges_boundary_rows():
    """Rows in halves: segment (y NT, z T) reads input rows 0-3 / 2-5 and pads only at the
    image border; o's tiles each take one row of z from the other device, not via home. A
    boundary's pieces are cut and sent first, then joined, then the tiles computed."""

    @I.ir_module
    class Expected:
        I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

        @R.function
        def main(
            x: R.Tensor((1, 2, 6, 6), "float32", "llvm:0"),
            w: R.Tensor((2, 2, 3, 3), "float32", "llvm:0"),
        ) -> R.Tensor((1, 2, 6, 6), "float32", "llvm:0"):
            with R.dataflow():
                x0 = R.strided_slice(x, axes=[2], begin=[0], end=[4])
                x1 = R.strided_slice(x, axes=[2], begin=[2], end=[6])
                x1d = R.to_vdevice(x1, "llvm:1")
                w1 = R.to_vdevice(w, "llvm:1")
                y0 = R.nn.conv2d(x0, w, padding=[1, 1, 0, 1])
                z0 = R.nn.relu(y0)
                y1 = R.nn.conv2d(x1d, w1, padding=[0, 1, 1, 1])
                z1 = R.nn.relu(y1)
                z1_top = R.strided_slice(z1, axes=[2], begin=[0], end=[1])
                z1_top0 = R.to_vdevice(z1_top, "llvm:0")
                z0_bottom = R.strided_slice(z0, axes=[2], begin=[2], end=[3])
                z0_bottom1 = R.to_vdevice(z0_bottom, "llvm:1")
                in0 = R.concat((z0, z1_top0), axis=2)
                in1 = R.concat((z0_bottom1, z1), axis=2)
                o0 = R.nn.conv2d(in0, w, padding=[1, 1, 0, 1])
                o1 = R.nn.conv2d(in1, w1, padding=[0, 1, 1, 1])
                o1h = R.to_vdevice(o1, "llvm:0")
                gathered = R.concat((o0, o1h), axis=2)
                o = gathered
                R.output(o)
            return o

    segments = [{"ops": ["y", "z"], "scheme": "InH"}, {"ops": ["o"], "scheme": "InH"}]
    before = ConvChain.clone()
    after = tvm.transform.Sequential([PlaceOperators({}), PartitionSpatialTiles(segments)])(
        ConvChain
    )
    tvm.ir.assert_structural_equal(after, Expected)
    tvm.ir.assert_structural_equal(ConvChain, before)


@I.ir_module
class WithCumsum:
    I.module_global_infos({"vdevice": [I.vdevice("llvm", 0), I.vdevice("llvm", 1)]})

    @R.function
    def main(x: R.Tensor((1, 2, 6, 6), "float32")):
        with R.dataflow():
            s = R.cumsum(x, axis=3)
            o = R.nn.relu(s)
            R.output(o)
        return o


def test_a_segment_refused_half_way_leaves_no_tvm_warning(capfd):
    """The builder's open block is closed when a segment is refused inside it: TVM warned
    "BlockBuilder destroyed with remaining blocks" on stderr for every such plan."""
    import gc

    segs = [{"ops": ["s"], "scheme": "InW"}, {"ops": ["o"], "scheme": "Home"}]
    with pytest.raises(ValueError, match="has no tile rule"):
        PartitionSpatialTiles(segs)(PlaceOperators({})(WithCumsum))
    gc.collect()
    assert "BlockBuilder destroyed" not in capfd.readouterr().err


def test_bad_segments_are_refused_with_the_reason():
    place = PlaceOperators({})
    with pytest.raises(ValueError, match=r"allowed: \['InH'"):
        PartitionSpatialTiles([{"ops": ["y"], "scheme": "Rows"}])
    with pytest.raises(ValueError, match="operator 'o' is in no segment"):
        PartitionSpatialTiles([{"ops": ["y", "z"], "scheme": "InH"}])(place(ConvChain))
    segs = [{"ops": ["s"], "scheme": "InW"}, {"ops": ["o"], "scheme": "Home"}]
    with pytest.raises(ValueError, match=r"'s' \(relax.cumsum\) has no tile rule"):
        PartitionSpatialTiles(segs)(place(WithCumsum))
    segs = [{"ops": ["z"], "scheme": "Home"}, {"ops": ["y"], "scheme": "Home"},
            {"ops": ["o"], "scheme": "Home"}]  # fmt: skip
    with pytest.raises(ValueError, match="segment 0 reads 'y' of segment 1"):
        PartitionSpatialTiles(segs)(place(ConvChain))


def _conv_stack() -> Model:
    """Odd sizes, stride 2, dilation 2, a depthwise convolution, both poolings, a bias."""
    rng = np.random.default_rng(0)

    def const(*shape):
        return relax.const(rng.standard_normal(shape).astype("float32"))

    x = relax.Var("x", TensorType((1, 3, 19, 17), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            nn = relax.op.nn
            a = bb.emit(nn.conv2d(x, const(6, 3, 3, 3), strides=2, padding=1), "a")
            b = bb.emit(relax.op.add(a, const(1, 6, 1, 1)), "b")
            c = bb.emit(nn.relu(b), "c")
            d = bb.emit(nn.conv2d(c, const(6, 1, 3, 3), padding=2, dilation=2, groups=6), "d")
            e = bb.emit(nn.max_pool2d(d, 3, 1, 1), "e")
            f = bb.emit(nn.conv2d(e, const(5, 6, 5, 3), padding=(2, 1, 1, 1)), "f")
            g = bb.emit(nn.avg_pool2d(f, 2, 2, 0), "g")
            out = bb.emit_output(nn.conv2d(g, const(4, 5, 1, 1)))
        bb.emit_func_output(out)
    return Model("conv-stack", bb.get(), (InputSpec("x", (1, 3, 19, 17), "float32"),), "test")


def _check(model: Model, segments, schemes, devices) -> None:
    plan = SpatialPlan(tuple(d.name for d in devices), tuple(map(tuple, segments)), schemes)
    inputs = model.random_inputs()
    got = api.run(api.compile(model, devices, plan), inputs)
    want = api.reference_outputs(model, inputs, devices[0])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _joined(layers: list[list[str]]) -> list[str]:
    return [op for ops in layers for op in ops]


def _layers(model: Model) -> list[list[str]]:
    return [list(ops) for ops in pipeline_layers(OpGraph.from_module(model.mod)).ops]


@pytest.fixture(scope="module")
def three_cpus():
    return [cpu_device(0), cpu_device(1), cpu_device(2)]


@pytest.mark.parametrize(
    "scheme", ["InH", *(pytest.param(s, marks=pytest.mark.slow) for s in ("InW", "OutC", "Grid"))]
)  # the mixed-scheme tests below cover each scheme in both modes by default (make test-slow)
def test_conv_stack_tiles_equal_the_whole_model(scheme, three_cpus):
    """Runs of two layers fused (NT then T) and single layers (T), on three devices."""
    model = _conv_stack()
    layers = _layers(model)
    segments = [_joined(layers[i : i + 2]) for i in range(0, 4, 2)] + layers[4:]
    _check(model, segments, (scheme,) * len(segments), three_cpus)


def test_conv_stack_with_a_scheme_change_at_every_layer(three_cpus):
    """Every T boundary re-arranges tiles between two different schemes."""
    model = _conv_stack()
    layers = _layers(model)
    cycle = ("InH", "OutC", "Grid", "InW", "Home")
    _check(model, layers, tuple(cycle[k % 5] for k in range(len(layers))), three_cpus)


@pytest.mark.parametrize(
    "name", [pytest.param("mobilenet:tiny", marks=pytest.mark.slow), "resnet18:tiny"]
)
def test_zoo_cnns_in_mixed_fused_schemes_equal_the_whole_model(name, three_cpus):
    """Fused runs of three layers, the scheme changing between runs; the classifier head (no
    tile rule: flatten, matmul) stays Home."""
    model = load_zoo_model(name)
    layers = _layers(model)
    kinds = {b.node_id: str(b.call.op.name) for b in op_bindings(model.mod["main"])}
    head = next(k for k, ops in enumerate(layers) if any(kinds[op] == "relax.mean" for op in ops))
    body = [_joined(layers[i : min(i + 3, head)]) for i in range(0, head, 3)]
    schemes = tuple(("Grid", "InH", "OutC", "InW")[k % 4] for k in range(len(body)))
    _check(model, [*body, _joined(layers[head:])], (*schemes, "Home"), three_cpus)


def _runs_of(model: Model, scheme: str, run: int, devices: int):
    """Segments of up to ``run`` layers in ``scheme``, shorter where a longer run has no tile
    rule, ``Home`` where not even one layer has."""
    from tvm_hetero.strategies.flexpie.planner import TileGeometry, flexpie_layers

    layers = flexpie_layers(model)
    geometry = TileGeometry(model, layers, devices)
    segments, schemes, k = [], [], 0
    while k < len(layers):
        d = min(run, len(layers) - k)
        while d > 1 and geometry.tiles(k, d, scheme) is None:
            d -= 1
        schemes.append(scheme if geometry.tiles(k, d, scheme) is not None else "Home")
        segments.append(_joined(layers[k : k + d]))
        k += d
    return segments, tuple(schemes)


@pytest.mark.parametrize(
    ("scheme", "run"), [("InH", 4), pytest.param("OutC", 2, marks=pytest.mark.slow)]
)
def test_bert_tokens_or_features_equal_the_whole_model(scheme, run, three_cpus):
    """A transformer by token rows (attention reads every key: the K and V projections are
    computed whole where fused) or by feature columns, through the fused QKV split."""
    model = load_zoo_model("bert-small:tiny")
    segments, schemes = _runs_of(model, scheme, run, 3)
    assert schemes.count(scheme) >= 3
    _check(model, segments, schemes, three_cpus)


def test_a_vit_cut_by_token_rows_through_its_class_token_split_equals_the_whole_model(three_cpus):
    """ViT's class token is a split whose other part no one reads: the segment that ends in
    the split's used item is tiled (the unused item is dropped), where it was refused."""
    model = load_zoo_model("vit-base:tiny")
    segments, schemes = _runs_of(model, "InH", 1, 3)
    assert schemes.count("InH") >= 3
    _check(model, segments, schemes, three_cpus)


@pytest.mark.slow  # a torch export and a three-device build of ResNet-18 at 64x64 (make test-slow)
def test_torchvision_resnet18_with_batch_norm_equals_the_whole_model(three_cpus):
    """torchvision's ResNet-18 (random weights, batch norm not folded): every scheme through
    batch norm's per-channel item."""
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    from tvm_hetero.frontends import load_model

    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None).eval()
    model = load_model(net, example_args=(torch.randn(1, 3, 64, 64),), name="resnet18-tv")
    segments, schemes = _runs_of(model, "Grid", 2, 3)
    assert schemes.count("Grid") >= 4
    _check(model, segments, schemes, three_cpus)
