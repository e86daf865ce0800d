"""MergeParallelConvolutions: sums of convolutions of one input as one convolution."""

import numpy as np
import pytest
import tvm
from conftest import same_numbers_after
from tvm import relax

from tvm_hetero import api
from tvm_hetero._compat import VDevice, make_target
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import load_model
from tvm_hetero.passes import MergeParallelConvolutions

CPU = {"kind": "llvm", "mcpu": "haswell"}
RNG = np.random.default_rng(3)
W3, W1, W4 = (RNG.standard_normal(s).astype("float32")
              for s in ((4, 4, 3, 3), (4, 4, 1, 1), (4, 4, 4, 4)))  # fmt: skip
B3, B1 = (RNG.standard_normal(4).astype("float32") for _ in range(2))
GAMMA, BETA, MEAN = (RNG.standard_normal(4).astype("float32") for _ in range(3))
VAR = RNG.uniform(0.5, 2.0, 4).astype("float32")


def _module(build, shape=(1, 4, 6, 6), inputs=1):
    """``main(x...)`` whose body ``build(bb, *xs)`` emits, on one CPU vdevice."""
    vdev = VDevice(make_target(CPU), 0, "global")
    xs = [relax.Var(f"x{k}", relax.TensorType(shape, "float32", vdev)) for k in range(inputs)]
    bb = relax.BlockBuilder()
    with bb.function("main", xs):
        with bb.dataflow():
            out = bb.emit_output(build(bb, *xs))
        bb.emit_func_output(out)
    mod = bb.get()
    mod.update_global_info("vdevice", [vdev])
    return relax.transform.RealizeVDevice()(mod)


def _conv(bb, x, w, bias=None, stride=1, padding=None, groups=1):
    pad = (w.shape[2] // 2) if padding is None else padding
    y = bb.emit(relax.op.nn.conv2d(x, relax.const(w), stride, pad, groups=groups))
    if bias is None:
        return y
    reshaped = bb.emit(relax.op.reshape(relax.const(bias), (1, -1, 1, 1)))
    return bb.emit(relax.op.add(y, reshaped))


def _identity(bb, x):
    consts = map(relax.const, (GAMMA, BETA, MEAN, VAR))
    norm = bb.emit(relax.op.nn.batch_norm(x, *consts, axis=1, training=False))
    return bb.emit(relax.TupleGetItem(norm, 0))


def _repvgg(bb, x):
    """A RepVGG block's sum: 3x3 with bias + 1x1 with bias + the identity's normalization."""
    return relax.op.add(bb.emit(relax.op.add(_conv(bb, x, W3, B3), _conv(bb, x, W1, B1))),
                        _identity(bb, x))  # fmt: skip


def _calls(mod):
    out = []
    relax.analysis.post_order_visit(
        mod["main"].body,
        lambda e: (
            out.append(e) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None
        ),
    )
    return out


def test_a_repvgg_block_becomes_one_convolution_and_one_bias():
    before = _module(_repvgg)
    text = before.script()
    after = MergeParallelConvolutions()(before)
    assert before.script() == text  # the input is not mutated
    conv, add = _calls(after)
    weights, bias = conv.args[1].value.numpy(), add.args[1].value.numpy()

    def expected(bb, x):  # the structure, with the merged constants checked apart below
        y = bb.emit(relax.op.nn.conv2d(x, relax.const(weights), 1, 1))
        return relax.op.add(y, relax.const(bias))

    tvm.ir.assert_structural_equal(after, _module(expected))
    scale = GAMMA / np.sqrt(VAR + 1e-5)
    want = W3.astype("float64").copy()
    want[:, :, 1, 1] += W1[:, :, 0, 0] + np.diag(scale)
    np.testing.assert_allclose(weights, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(bias.reshape(-1), B3 + B1 + BETA - MEAN * scale, rtol=1e-6,
                               atol=1e-6)  # fmt: skip
    same_numbers_after(MergeParallelConvolutions(), before)


@pytest.mark.parametrize(
    "build",
    [
        # MobileOne's depthwise branches: four 3x3, a 1x1 and the identity, one group a channel
        lambda bb, x: relax.op.add(
            bb.emit(_sum(bb, [_conv(bb, x, w, groups=4) for w in _depthwise(5)])),
            _identity(bb, x),
        ),
        # windows shifted against each other (padding 1 and [2, 2, 0, 0]): a 4x4 window
        lambda bb, x: relax.op.add(_conv(bb, x, W3), _conv(bb, x, W3, padding=[2, 2, 0, 0])),
        # strided: 3x3 and 1x1 with stride 2
        lambda bb, x: relax.op.add(_conv(bb, x, W3, B3, 2), _conv(bb, x, W1, None, 2)),
    ],
    ids=["mobileone", "shifted", "strided"],
)
def test_sums_merge_into_one_convolution_with_the_same_numbers(build):
    after = same_numbers_after(MergeParallelConvolutions(), _module(build))
    assert [c.op.name for c in _calls(after)].count("relax.nn.conv2d") == 1


def _depthwise(count):
    shapes = [(4, 1, 3, 3)] * (count - 1) + [(4, 1, 1, 1)]
    return [RNG.standard_normal(s).astype("float32") for s in shapes]


def _sum(bb, terms):
    total = terms[0]
    for term in terms[1:]:
        total = bb.emit(relax.op.add(total, term))
    return total


@pytest.mark.parametrize(
    "build",
    [
        lambda bb, x, y: relax.op.add(_conv(bb, x, W3), _conv(bb, y, W3)),  # two inputs
        lambda bb, x, y: relax.op.add(_conv(bb, x, W3, stride=2), _conv(bb, x, W4, padding=0)),
        lambda bb, x, y: relax.op.add(_conv(bb, x, W3), x),  # x itself is no branch
        lambda bb, x, y: relax.op.multiply(_shared(bb, x), _conv(bb, x, W1)),  # no sum
    ],
    ids=["two_inputs", "strides_differ", "plain_x", "product"],  # 3x3 / 2 and 4x4 / 1: 3 x 3
)
def test_what_is_no_sum_of_branches_of_one_input_stays(build):
    mod = _module(build, inputs=2)
    tvm.ir.assert_structural_equal(MergeParallelConvolutions()(mod), mod)


def _shared(bb, x):
    return _conv(bb, x, W3)


def test_a_branch_read_elsewhere_stays():
    """The 3x3 branch's output is also a result: merging would compute it twice."""

    def build(bb, x):
        a = _conv(bb, x, W3)
        return relax.Tuple([bb.emit(relax.op.add(a, _conv(bb, x, W1))), a])

    mod = _module(build)
    tvm.ir.assert_structural_equal(MergeParallelConvolutions()(mod), mod)


def test_an_exported_repvgg_block_compiles_to_the_same_numbers(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.kxk = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
                                           torch.nn.BatchNorm2d(8))  # fmt: skip
            self.one = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1, bias=False),
                                           torch.nn.BatchNorm2d(8))  # fmt: skip
            self.identity = torch.nn.BatchNorm2d(8)

        def forward(self, x):
            return torch.relu(self.kxk(x) + self.one(x) + self.identity(x))

    torch.manual_seed(0)
    block = Block().eval()
    for norm in (m for m in block.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        norm.running_mean.uniform_(-1, 1)
        norm.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 8, 10, 10)
    path = tmp_path / "block.onnx"
    torch.onnx.export(block, (x,), str(path), input_names=["x"], dynamo=False)
    model = load_model(path)
    merged = MergeParallelConvolutions()(relax.transform.RealizeVDevice()(model.mod))
    assert [c.op.name for c in _calls(merged)].count("relax.nn.conv2d") == 1
    got = api.run(api.compile(model, [cpu_device()]), {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, block(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_a_normalization_in_training_mode_is_no_branch():
    """Training mode normalizes by the batch's statistics: no fixed scale; the two convolutions
    still merge, the normalization stays."""

    def build(bb, x):
        consts = map(relax.const, (GAMMA, BETA, MEAN, VAR))
        norm = bb.emit(relax.op.nn.batch_norm(x, *consts, axis=1, training=True))
        convs = bb.emit(relax.op.add(_conv(bb, x, W3, B3), _conv(bb, x, W1, B1)))
        return relax.op.add(convs, bb.emit(relax.TupleGetItem(norm, 0)))

    names = [c.op.name for c in _calls(MergeParallelConvolutions()(_module(build)))]
    assert names.count("relax.nn.conv2d") == 1 and "relax.nn.batch_norm" in names


def test_a_symbolic_batch_stays_and_does_not_fail():
    """A pass in a user's pipeline may see a batch given at run time: the sum stays as it is
    (its shapes were read as integers and the build failed)."""
    batch = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((batch, 4, 6, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(_conv(bb, x, W3), _conv(bb, x, W1)))
        bb.emit_func_output(out)
    mod = bb.get()
    tvm.ir.assert_structural_equal(MergeParallelConvolutions()(mod), mod)
