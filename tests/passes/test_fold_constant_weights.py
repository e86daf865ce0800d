"""FoldConstantWeights: convolution weights computed from constants, evaluated at load."""

from unittest.mock import patch

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.ir.expr import Constant

from tvm_hetero.frontends.load import from_irmodule
from tvm_hetero.passes import FoldConstantWeights
from tvm_hetero.passes import fold_constant_weights as fold

RNG = np.random.default_rng(0)
STORED = RNG.standard_normal((8, 36)).astype("float32")  # 8 filters of 4 x 3 x 3, flattened
GAIN = RNG.uniform(0.5, 1.5, (8, 1)).astype("float32")
X = RNG.standard_normal((1, 4, 6, 6)).astype("float32")


def _module(weight_of) -> tvm.IRModule:
    """``main(x) = conv2d(x, weight_of(bb))``, padding 1, built with a block builder."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 6, 6), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            w = weight_of(bb, x)
            y = bb.emit_output(relax.op.nn.conv2d(x, w, padding=1))
        bb.emit_func_output(y)
    return bb.get()


def _scaled(bb, _x):
    """The stored filters times a gain per filter, reshaped: exact in float32."""
    scaled = bb.emit(relax.op.multiply(relax.const(STORED), relax.const(GAIN)))
    return bb.emit(relax.op.reshape(scaled, (8, 4, 3, 3)))


def _standardised(bb, _x):
    """NF-ResNet's filters (timm's ``ScaledStdConv2d``): each filter less its mean over its
    standard deviation, through a batch norm in training mode, as the ONNX export has it."""
    stored = relax.const(STORED.reshape(1, 8, 36))
    zeros, ones = relax.const(np.zeros(8, "float32")), relax.const(np.ones(8, "float32"))
    gain = relax.const(GAIN.reshape(8))
    norm = relax.op.nn.batch_norm(stored, gain, zeros, zeros, ones, 1, 1e-5, training=True)
    normed = bb.emit(norm)
    first = bb.emit(relax.TupleGetItem(normed, 0))
    return bb.emit(relax.op.reshape(first, (8, 4, 3, 3)))


def _weights(mod: tvm.IRModule) -> list[relax.Expr]:
    convs = [b.value for b in mod["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]  # fmt: skip
    return [c.args[1] for c in convs]


def _run(mod: tvm.IRModule) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(relax.transform.LegalizeOps()(mod)), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(X)).numpy()


def test_a_weight_computed_from_constants_becomes_its_value():
    """Before: the convolution reads ``reshape(stored * gain)``; expected: it reads the
    product as a constant, nothing else left."""
    after = FoldConstantWeights()(_module(_scaled))
    expected = _module(lambda bb, x: relax.const((STORED * GAIN).reshape(8, 4, 3, 3)))
    tvm.ir.assert_structural_equal(after, expected)


def test_a_standardised_weight_folds_through_its_batch_norm_and_computes_the_same():
    """The batch norm in training mode normalises by the filters' own statistics (its
    decomposition for inference would use the moving ones, zero and one here: the weight
    would be the stored one times the gain). Numbers: the module before and after."""
    before = _module(_standardised)
    (weight,) = _weights(FoldConstantWeights()(before))
    assert isinstance(weight, Constant)
    flat = STORED.astype("float64")
    want = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(weight.value.numpy().reshape(8, 36), want * GAIN, rtol=1e-5)
    np.testing.assert_allclose(_run(FoldConstantWeights()(before)), _run(before), rtol=1e-5,
                               atol=1e-5)  # fmt: skip


def _two_batch_norms(modes: tuple[bool, bool]) -> tvm.IRModule:
    """``main() = bn(w, training=modes[0])[0] + bn(w, training=modes[1])[0]``."""
    stored, ones = relax.const(STORED.reshape(1, 8, 36)), relax.const(np.ones(8, "float32"))
    zeros = relax.const(np.zeros(8, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            outs = []
            for training in modes:
                norm = relax.op.nn.batch_norm(stored, ones, zeros, zeros, ones, 1, 1e-5,
                                              training=training)  # fmt: skip
                outs.append(bb.emit(relax.TupleGetItem(bb.emit(norm), 0)))
            y = bb.emit_output(relax.op.add(*outs))
        bb.emit_func_output(y)
    return bb.get()


@pytest.mark.parametrize("modes", [(True, True), (False, False), (True, False)])
def test_batch_norms_are_decomposed_for_their_mode_or_left(modes):
    """All in training mode or all in inference mode: decomposed into operators of one
    output each (``FoldConstantKernels`` folds those in one build), computing what they did;
    mixed: left (TVM's decompositions take every batch norm as one mode)."""
    mod = _two_batch_norms(modes)
    after = fold._batch_norms_decomposed(mod)
    if len(set(modes)) > 1:
        tvm.ir.assert_structural_equal(after, mod)
        return
    assert "batch_norm" not in after.script()

    def run(m):
        vm = relax.VirtualMachine(tvm.compile(relax.transform.LegalizeOps()(m)), tvm.cpu())
        return vm["main"]().numpy()

    np.testing.assert_allclose(run(after), run(mod), rtol=1e-5, atol=1e-5)


def test_a_weight_computed_from_an_input_is_left():
    def from_input(bb, x):  # 8 filters of 4 x 3 x 3 from the input's 144 values, twice
        return bb.emit(relax.op.reshape(relax.op.tile(x, [2, 1, 1, 1]), (8, 4, 3, 3)))

    mod = _module(from_input)
    tvm.ir.assert_structural_equal(FoldConstantWeights()(mod), mod)


def test_a_fold_that_fails_leaves_the_module_as_it_was():
    mod = _module(_scaled)

    def failing(*_args, **_kw):
        raise RuntimeError("no")

    with patch.object(fold, "FoldConstantKernels", failing):
        tvm.ir.assert_structural_equal(FoldConstantWeights()(mod), mod)


def test_loading_a_module_folds_its_weights():
    model = from_irmodule(_module(_scaled), "m", "irmodule")
    (weight,) = _weights(model.mod)
    assert isinstance(weight, Constant)


@pytest.mark.parametrize("op", sorted(fold.CONVOLUTIONS))
def test_every_convolution_operator_is_a_relax_operator(op):
    assert tvm.ir.Op.get(op).name == op
