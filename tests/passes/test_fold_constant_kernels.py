"""FoldConstantKernels: kernels of constants evaluated at compile time, all in one build, as
TVM's FoldConstant folds them one build each."""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from tvm_hetero.build.compiled import place
from tvm_hetero.build.multi_device import lower
from tvm_hetero.passes import FoldConstantKernels
from tvm_hetero.pipelines import PASSES
from tvm_hetero.plan import Placement
from tvm_hetero.zoo import load_zoo_model

W = np.random.default_rng(0).standard_normal((4, 6)).astype("float32")


def _matmul_module(weight) -> tvm.IRModule:
    """``x @ prepare(W)`` legalized, ``prepare`` building on the constant ``W``."""
    x = relax.Var("x", relax.TensorType((2, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(x, weight(bb)))
        bb.emit_func_output(out)
    return relax.transform.LegalizeOps()(bb.get())


def _chain(bb):  # W -> its transpose -> 8 x 3 -> + 1: three kernels of constants, in a chain
    t = bb.emit(relax.op.permute_dims(relax.const(W)))
    r = bb.emit(relax.op.reshape(t, (8, 3)))
    return bb.emit(relax.op.add(r, relax.const(np.float32(1))))


def _called(mod: tvm.IRModule) -> list[str]:
    """The kernels ``main`` calls, in order."""
    found = []
    relax.analysis.post_order_visit(
        mod["main"],
        lambda e: (
            found.append(e.args[0].name_hint)
            if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir"
            else None
        ),
    )
    return found


def _builds(monkeypatch) -> list[list[str]]:
    """The kernels of every ``tvm.tirx.build`` call from here on."""
    calls, build = [], tvm.tirx.build

    def counted(mod, *args, **kwargs):
        calls.append(sorted(gv.name_hint for gv in mod.get_global_vars()))
        return build(mod, *args, **kwargs)

    monkeypatch.setattr(tvm.tirx, "build", counted)
    return calls


def test_a_chain_of_constant_kernels_becomes_one_constant(monkeypatch):
    before = _matmul_module(_chain)
    text = before.script()
    builds = _builds(monkeypatch)
    after = FoldConstantKernels()(before)
    assert before.script() == text  # the input is not mutated
    expected = _matmul_module(lambda bb: relax.const(W.T.reshape(8, 3) + 1))
    tvm.ir.assert_structural_equal(after["main"], expected["main"], map_free_vars=True)
    assert _called(after) == ["matmul"]
    assert builds == [["fold_0", "fold_1", "fold_2"]]  # the chain's three kernels, one build
    x = np.random.default_rng(1).standard_normal((2, 8)).astype("float32")
    assert np.allclose(_run(after, x), _run(before, x)) and np.allclose(
        _run(after, x), x @ (W.T.reshape(8, 3) + 1)
    )


def _run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_independent_kernels_and_one_of_both_fold_in_one_build(monkeypatch):
    def two(bb):  # two independent kernels of constants, then one of both
        a = bb.emit(relax.op.permute_dims(relax.const(W)))
        b = bb.emit(relax.op.multiply(relax.const(W.T), relax.const(np.float32(2))))
        return bb.emit(relax.op.reshape(relax.op.add(a, b), (8, 3)))

    builds = _builds(monkeypatch)
    after = FoldConstantKernels()(_matmul_module(two))
    expected = _matmul_module(lambda bb: relax.const((3 * W.T).reshape(8, 3)))
    tvm.ir.assert_structural_equal(after["main"], expected["main"], map_free_vars=True)
    assert _called(after) == ["matmul"]
    assert [len(kernels) for kernels in builds] == [4]  # transpose, multiply, add, reshape


def test_kernels_of_a_parameter_stay():
    x = relax.Var("x", relax.TensorType((4, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.permute_dims(relax.op.add(x, relax.const(W))))
        bb.emit_func_output(out)
    before = relax.transform.LegalizeOps()(bb.get())
    tvm.ir.assert_structural_equal(FoldConstantKernels()(before), before)


def test_a_failed_build_folds_nothing_and_tvm_s_fold_constant_still_folds(monkeypatch):
    def failing(mod, *args, **kwargs):
        raise RuntimeError("no code for this kernel")

    before = _matmul_module(_chain)
    monkeypatch.setattr(tvm.tirx, "build", failing)
    tvm.ir.assert_structural_equal(FoldConstantKernels()(before), before)
    monkeypatch.undo()
    folded = relax.transform.FoldConstant()(FoldConstantKernels()(before))
    expected = _matmul_module(lambda bb: relax.const(W.T.reshape(8, 3) + 1))
    tvm.ir.assert_structural_equal(folded["main"], expected["main"], map_free_vars=True)


@pytest.mark.parametrize("name", ["resnet18:tiny", "siamese-lstm:tiny", "bert-small:tiny"])
def test_zoo_builds_lower_to_what_tvm_s_fold_constant_alone_gives(name, monkeypatch, two_cpus):
    model = load_zoo_model(name)
    placed = place(model, two_cpus[:1], Placement((two_cpus[0].name,)))
    ours = lower(placed)
    monkeypatch.setitem(PASSES, "FoldConstantKernels", lambda: tvm.transform.Sequential([]))
    theirs = lower(placed)
    assert tvm_ffi.structural_equal(ours, theirs, map_free_vars=True)


def test_a_scattered_constant_folds_without_codegen_noise(capfd):
    """``scatter_nd`` over constants (Swin-T's shifted windows): topi's kernel wraps its
    statements in the IR builder's ``pragma_scope``, which LLVM's code generator reported on
    stderr as an unknown pragma once a kernel; folded now without a line on stderr, and to
    the values numpy gives."""
    data = np.zeros((8, 3), "float32")
    rows = np.array([[5], [2]], "int64")
    updates = np.arange(6, dtype="float32").reshape(2, 3) + 1

    def scattered(bb):
        consts = (relax.const(data), relax.const(rows), relax.const(updates))
        return bb.emit(relax.op.scatter_nd(*consts, "update"))

    before = _matmul_module(scattered)
    assert "pragma_scope" in before.script()
    capfd.readouterr()
    after = FoldConstantKernels()(before)
    assert "pragma" not in capfd.readouterr().err
    assert _called(after) == ["matmul"]
    weight = data.copy()
    weight[[5, 2]] = updates
    x = np.random.default_rng(1).standard_normal((2, 8)).astype("float32")
    assert np.allclose(_run(after, x), x @ weight)
