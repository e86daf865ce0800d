"""Loop kernels of recurrent layers: numerics against a NumPy recurrence, layouts, CUDA code."""

import shutil

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_hetero.ir.recurrent import (
    ONNX_ORDER,
    PARALLEL_MACS,
    RECURRENT_ATTR,
    TORCH_ORDER,
    RecurrentLoop,
    loop_kernel,
    pack_weights,
    retarget,
)

CPU = tvm.target.Target({"kind": "llvm", "num-cores": 2})


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def recurrence(spec, xw, rt, rb, h0, c0):
    """The layer step by step in NumPy, gates read in ``spec.order``: ``y, h_n, c_n``."""
    hidden = spec.hidden
    h, c, ys = h0, c0, [None] * spec.seq
    for t in reversed(range(spec.seq)) if spec.reverse else range(spec.seq):
        rec = h @ rt + rb

        def gate(k, block):
            return block[:, spec.order[k] * hidden : (spec.order[k] + 1) * hidden]

        x = [gate(k, xw[t]) for k in range(spec.gates)]
        a = [gate(k, rec) for k in range(spec.gates)]
        if spec.cell == "LSTM":
            c = _sigmoid(x[2] + a[2]) * c + _sigmoid(x[0] + a[0]) * np.tanh(x[3] + a[3])
            h = _sigmoid(x[1] + a[1]) * np.tanh(c)
        elif spec.cell == "GRU":
            z, r = _sigmoid(x[0] + a[0]), _sigmoid(x[1] + a[1])
            h = (1 - z) * np.tanh(x[2] + r * a[2]) + z * h
        else:
            h = np.tanh(x[0] + a[0])
        ys[t] = h
    return np.stack(ys), h, c


def _inputs(spec, seed=0):
    rng = np.random.default_rng(seed)
    width = spec.gates * spec.hidden
    scale = 1 / np.sqrt(spec.hidden)
    return [
        rng.standard_normal((spec.seq, spec.batch, width)).astype("float32"),
        (rng.standard_normal((spec.hidden, width)) * scale).astype("float32"),
        (rng.standard_normal(width) * 0.1).astype("float32"),
        rng.standard_normal((spec.batch, spec.hidden)).astype("float32"),
        rng.standard_normal((spec.batch, spec.hidden)).astype("float32"),
    ]


def _packed(spec, rt):
    blocks, hidden, gates, block = spec.packed_shape
    return rt.reshape(hidden, gates, blocks, block).transpose(2, 0, 1, 3)


def _run_kernel(spec, inputs):
    func = loop_kernel(spec).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": func}), target=CPU)
    xw, rt, rb, h0, c0 = inputs
    args = [xw, np.ascontiguousarray(_packed(spec, rt)), rb, h0, c0]
    outs = [np.zeros((spec.seq, spec.batch, spec.hidden), "float32")] + [
        np.zeros((spec.batch, spec.hidden), "float32") for _ in range(2)
    ]
    arrays = [tvm.runtime.tensor(a) for a in args + outs]
    lib.mod["main"](*arrays)
    return [a.numpy() for a in arrays[len(args) :]]


SPECS = [
    RecurrentLoop("LSTM", 5, 2, 24, reverse=True, order=TORCH_ORDER["LSTM"]),
    RecurrentLoop("LSTM", 3, 1, 5),  # one unit a vector
    RecurrentLoop("LSTM", 4, 4, 64),  # a step of PARALLEL_MACS: unit blocks in parallel
    RecurrentLoop("GRU", 4, 3, 16, order=TORCH_ORDER["GRU"]),
    RecurrentLoop("GRU", 6, 1, 32, reverse=True),
    RecurrentLoop("GRU", 1, 16, 64),  # one step in parallel blocks (TVM's CSE broke it once)
    RecurrentLoop("RNN", 3, 2, 12, reverse=True),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key().replace(" ", ","))
def test_loop_kernel_equals_the_recurrence(spec):
    inputs = _inputs(spec)
    y, h_n, c_n = _run_kernel(spec, inputs)
    want_y, want_h, want_c = recurrence(spec, *inputs)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(h_n, want_h, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(c_n, want_c if spec.cell == "LSTM" else inputs[4], atol=2e-6)


def test_the_parallel_case_is_parallel_and_the_small_one_is_not():
    big, small = SPECS[2], SPECS[0]
    assert big.gates * big.hidden**2 * big.batch >= PARALLEL_MACS
    assert ".parallel" in loop_kernel(big).script()
    assert ".parallel" not in loop_kernel(small).script()


def test_a_wrong_gate_order_is_caught_by_the_recurrence():
    spec = SPECS[0]
    swapped = RecurrentLoop(spec.cell, spec.seq, spec.batch, spec.hidden, spec.reverse,
                            ONNX_ORDER["LSTM"])  # fmt: skip
    inputs = _inputs(spec)
    y, _, _ = _run_kernel(swapped, inputs)
    assert np.abs(y - recurrence(spec, *inputs)[0]).max() > 1e-2


def test_packed_weights_are_the_kernels_layout():
    spec = RecurrentLoop("LSTM", 2, 1, 64)
    rt = np.arange(64 * 256, dtype="float32").reshape(64, 256)
    bb = relax.BlockBuilder()
    x = relax.Var("rt", relax.TensorType((64, 256), "float32"))
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(pack_weights(x, spec)))
    lib = relax.build(bb.get(), target=CPU)
    got = relax.VirtualMachine(lib, tvm.cpu())["main"](tvm.runtime.tensor(rt)).numpy()
    assert got.shape == spec.packed_shape == (2, 64, 4, 32)
    u, k, g, j = 1, 5, 2, 7  # unit 39 of gate 2 at row 5
    assert got[u, k, g, j] == rt[k, g * 64 + u * 32 + j]


def test_key_round_trips_and_bad_specs_are_refused():
    for spec in SPECS:
        assert RecurrentLoop.from_key(spec.key()) == spec
    with pytest.raises(ValueError, match="cell 'LSTMX'"):
        RecurrentLoop("LSTMX", 1, 1, 1)
    with pytest.raises(ValueError, match="not a permutation"):
        RecurrentLoop("GRU", 1, 1, 1, order=(0, 0, 1))
    with pytest.raises(ValueError, match="must be positive"):
        RecurrentLoop("RNN", 0, 1, 1)


def test_retarget_keeps_the_target_and_marks_it_scheduled():
    spec = SPECS[3]
    func = loop_kernel(spec).with_attr("target", CPU)
    again = retarget(func, CPU)
    assert again.attrs["tirx.is_scheduled"]
    assert str(again.attrs["target"].kind.name) == "llvm"
    assert again.attrs[RECURRENT_ATTR] == spec.key()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_gpu_kernel_is_one_block_with_two_barriers_a_step_and_none_under_a_condition():
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    spec = RecurrentLoop("LSTM", 3, 11, 100)  # 1,100 units and sequences: 2 rounds of 1,024
    func = retarget(loop_kernel(spec).with_attr("target", cuda), cuda)
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), cuda)
    lines = [ln.strip() for ln in lib.mod.imports[0].inspect_source().splitlines()]
    assert any("__launch_bounds__(1024)" in ln for ln in lines)
    syncs = [k for k, ln in enumerate(lines) if ln == "__syncthreads();"]
    step = next(k for k, ln in enumerate(lines) if ln.startswith("for (int s = 0; s < 3;"))
    assert len(syncs) == 2 and all(k > step for k in syncs)  # before reading h, before writing
    for k, ln in enumerate(lines):  # every `if` closes (its first "}") before a barrier
        if ln.startswith("if ("):
            end = next(j for j in range(k, len(lines)) if lines[j] == "}")
            assert not any(k < s < end for s in syncs)
