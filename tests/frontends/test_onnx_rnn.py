"""ONNX LSTM / GRU / RNN converters: numerics against ONNX Runtime in every configuration."""

import warnings

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

from tvm_hetero import api
from tvm_hetero.devices import cpu_device
from tvm_hetero.frontends import ModelLoadError, UnsupportedOperatorError, load_model
from tvm_hetero.ir.recurrent import RECURRENT_ATTR

ort = pytest.importorskip("onnxruntime")

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
SEQ, BATCH, INPUT, HIDDEN = 4, 2, 3, 5


def _recurrent_model(path, op, *, direction="forward", layout=0, bias=True, lens=None,
                     initial=False, peepholes=False, outputs=None, seq=SEQ, **attrs):  # fmt: skip
    """One ``op`` node with random weights; ``X`` (and the initial states) are inputs."""
    rng = np.random.default_rng(0)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    inits = [
        numpy_helper.from_array(rng.standard_normal((dirs, g * HIDDEN, INPUT)).astype("float32"), "W"),
        numpy_helper.from_array(rng.standard_normal((dirs, g * HIDDEN, HIDDEN)).astype("float32"), "R"),
    ]  # fmt: skip
    names = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inits.append(numpy_helper.from_array(
            rng.standard_normal((dirs, 2 * g * HIDDEN)).astype("float32"), "B"))  # fmt: skip
        names[3] = "B"
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array(lens, "int32"), "lens"))
        names[4] = "lens"
    x_shape = [BATCH, seq, INPUT] if layout else [seq, BATCH, INPUT]
    state = [BATCH, dirs, HIDDEN] if layout else [dirs, BATCH, HIDDEN]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    if initial:
        for k, name in enumerate(("h0", "c0")[: 2 if op == "LSTM" else 1]):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, state))
            names[5 + k] = name
    if peepholes:
        inits.append(numpy_helper.from_array(
            rng.standard_normal((dirs, 3 * HIDDEN)).astype("float32"), "P"))  # fmt: skip
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    outputs = outputs or (["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"])
    node = helper.make_node(op, names, outputs, hidden_size=HIDDEN, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)  # fmt: skip
    graph = helper.make_graph(
        [node], op.lower(), inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o], inits,
    )  # fmt: skip
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=9), path
    )
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype("float32") for i in inputs}  # fmt: skip
    return feeds


def _matches_onnx_runtime(path, feeds, reference=None, recurrent="loop"):
    """Our build of ``path`` (``recurrent`` form) against ONNX Runtime on ``reference``
    (default ``path``)."""
    session = ort.InferenceSession(str(reference or path), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds if reference is None else _batch_second(feeds))
    if reference is not None:  # back to layout 1: Y (batch, seq, dirs, h), states (batch, dirs, h)
        expected = [
            e.transpose(2, 0, 1, 3) if e.ndim == 4 else e.transpose(1, 0, 2) for e in expected
        ]
    got = api.reference_outputs(load_model(path, recurrent=recurrent), feeds, cpu_device())
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def _batch_second(feeds):
    """Layout-1 inputs as layout 0 (ONNX Runtime runs layout 0 only)."""
    return {k: np.ascontiguousarray(v.transpose(1, 0, 2)) for k, v in feeds.items()}


CASES = {
    "lstm_forward": ("LSTM", {}),
    "lstm_reverse_no_bias": ("LSTM", {"direction": "reverse", "bias": False}),
    "lstm_bidirectional_states_layout1": (
        "LSTM", {"direction": "bidirectional", "initial": True, "layout": 1}),
    "lstm_peepholes_clip": ("LSTM", {"peepholes": True, "clip": 0.7, "initial": True}),
    "lstm_input_forget": ("LSTM", {"input_forget": 1}),
    "lstm_lengths_bidirectional": ("LSTM", {"direction": "bidirectional", "lens": [4, 2]}),
    "lstm_only_last_state": ("LSTM", {"outputs": ["", "Y_h"]}),
    "lstm_activations": ("LSTM", {
        "direction": "bidirectional",
        "activations": ["HardSigmoid", "LeakyRelu", "Softsign", "Sigmoid", "Elu", "Tanh"],
        "activation_alpha": [0.3, 0.05, 0.8], "activation_beta": [0.4]}),
    "gru_linear_before_reset": ("GRU", {"linear_before_reset": 1, "initial": True}),
    "gru_reset_first_reverse": ("GRU", {"direction": "reverse"}),
    "gru_bidirectional_layout1_lengths": (
        "GRU", {"direction": "bidirectional", "layout": 1, "lens": [3, 4]}),
    "gru_activations_clip": ("GRU", {
        "activations": ["Affine", "Relu"], "activation_alpha": [0.5],
        "activation_beta": [0.1], "clip": 2.0}),
    "rnn_forward": ("RNN", {}),
    "rnn_bidirectional_relu_states": (
        "RNN", {"direction": "bidirectional", "activations": ["Relu", "Relu"], "initial": True}),
    "rnn_layout1_scaled_tanh": ("RNN", {"layout": 1, "activations": ["ScaledTanh"],
                                        "activation_alpha": [1.5], "activation_beta": [0.5]}),
    "rnn_thresholded_relu_softplus": ("RNN", {
        "direction": "bidirectional", "activations": ["ThresholdedRelu", "Softplus"],
        "activation_alpha": [0.2]}),
}  # fmt: skip


LOOPED = {"lstm_forward", "lstm_reverse_no_bias", "lstm_bidirectional_states_layout1",
          "lstm_only_last_state", "gru_linear_before_reset", "rnn_forward"}  # fmt: skip
"""The cases a loop kernel computes (default activations, no clip, peepholes, input_forget
or lengths; a GRU with linear_before_reset); the others are unrolled in either form."""


def _loop_kernels(model):
    return [
        gv.name_hint
        for gv, func in model.mod.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc) and RECURRENT_ATTR in func.attrs
    ]


@pytest.mark.parametrize(
    ("case", "recurrent"),
    [(c, "loop") for c in sorted(CASES)] + [(c, "unrolled") for c in sorted(LOOPED)],
)  # a case no loop kernel computes is unrolled either way
def test_matches_onnx_runtime(case, recurrent, tmp_path):
    op, options = CASES[case]
    path = tmp_path / f"{case}.onnx"
    feeds = _recurrent_model(path, op, **options)
    reference = None
    if options.get("layout"):  # the same weights in layout 0 for ONNX Runtime
        reference = tmp_path / "layout0.onnx"
        _recurrent_model(reference, op, **{**options, "layout": 0})
    _matches_onnx_runtime(path, feeds, reference, recurrent)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_loop_kernel_a_direction_where_the_cell_allows(case, tmp_path):
    op, options = CASES[case]
    path = tmp_path / f"{case}.onnx"
    _recurrent_model(path, op, **options)
    looped = load_model(path)
    calls = [
        b.value
        for block in looped.mod["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"
    ]
    kernels = set(_loop_kernels(looped))
    directions = 2 if options.get("direction") == "bidirectional" else 1
    want = directions if case in LOOPED else 0
    assert sum(c.args[0].name_hint in kernels for c in calls) == want
    assert _loop_kernels(load_model(path, recurrent="unrolled")) == []


def test_symbolic_sequence_asks_for_the_shape(tmp_path):
    path = tmp_path / "lstm.onnx"
    _recurrent_model(path, "LSTM", seq="S")
    with pytest.raises(UnsupportedOperatorError, match="sequence length of input X is symbolic"):
        load_model(path)
    assert load_model(path, shapes={"X": [SEQ, BATCH, INPUT]}).inputs[0].shape == (
        SEQ,
        BATCH,
        INPUT,
    )


def test_unknown_activation_is_named(tmp_path):
    path = tmp_path / "rnn.onnx"
    _recurrent_model(path, "RNN", activations=["Swish"])
    with pytest.raises(UnsupportedOperatorError, match="activation 'Swish' is not one of"):
        load_model(path)


TORCH_CASES = {
    "lstm_2_layers_bidirectional_batch_first": ("LSTM", {"num_layers": 2, "bidirectional": True,
                                                         "batch_first": True}, True),
    "gru": ("GRU", {}, False),
    # one step: the converter's item of a 1-tuple, whose binding TVM's FuseOps dropped
    "lstm_2_layers_batch_first_one_step": ("LSTM", {"num_layers": 2, "batch_first": True,
                                                    "seq": 1}, False),
    "gru_bidirectional_with_state": ("GRU", {"bidirectional": True}, True),
    "rnn_relu_2_layers": ("RNN", {"nonlinearity": "relu", "num_layers": 2}, False),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_torch_exports_match_onnx_runtime(case, tmp_path):
    torch = pytest.importorskip("torch")
    op, options, with_state = TORCH_CASES[case]
    options = dict(options)
    seq = options.pop("seq", SEQ)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, op)(INPUT, HIDDEN, **options)

        def forward(self, x, *state):
            out = self.rnn(x, *state)
            return out[0], out[1]

    torch.manual_seed(0)
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    x = (
        torch.randn(BATCH, seq, INPUT)
        if options.get("batch_first")
        else torch.randn(seq, BATCH, INPUT)
    )
    args = (x,)
    if with_state:
        h = torch.randn(layers, BATCH, HIDDEN)
        args = (x, (h, torch.randn_like(h))) if op == "LSTM" else (x, h)
    path = tmp_path / f"{case}.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        torch.onnx.export(Net().eval(), args, str(path), dynamo=False, opset_version=17)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    flat = [x] + ([*args[1]] if op == "LSTM" and with_state else list(args[1:]))
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), flat, strict=True)}
    _matches_onnx_runtime(path, feeds)
    assert bool(_loop_kernels(load_model(path))) == (case != "rnn_relu_2_layers")


def test_an_unknown_recurrent_form_is_refused(tmp_path):
    path = tmp_path / "rnn.onnx"
    _recurrent_model(path, "RNN")
    with pytest.raises(ModelLoadError, match="recurrent='fused' is not one of loop, unrolled"):
        load_model(path, recurrent="fused")


def test_a_loop_kernel_placed_off_the_home_device_is_profiled_and_planned(tmp_path):
    """Lee et al. on an ONNX LSTM over two cores: its profiling run with every operator on the
    second core times the loop kernel (its packed weights copied to that core: the run had
    stopped at the kernel, its operands on two devices), and ALS plans it."""
    from tvm_hetero.build.vdevices import vdevices_of
    from tvm_hetero.devices import resolve_device
    from tvm_hetero.ir.opgraph import OpGraph
    from tvm_hetero.pipelines import get_pipeline
    from tvm_hetero.profiling.profiler import profiler_for
    from tvm_hetero.strategies.als import planner

    path = tmp_path / "lstm.onnx"
    _recurrent_model(path, "LSTM")
    model = load_model(path)
    assert _loop_kernels(model)
    devices = [resolve_device("cpu@0"), resolve_device("cpu@1")]
    ops = [n.node_id for n in OpGraph.from_module(model.mod).nodes]
    placed = get_pipeline("manual_placement", vdevices=vdevices_of(devices),
                          assignment=dict.fromkeys(ops, 1))(model.mod)  # fmt: skip
    profiler = profiler_for(tmp_path / "db.jsonl")
    times = profiler.profile_op_times(placed, devices).extra["node_seconds"]
    assert sum(times.values()) > 0
    result = planner.plan_with_runs(model, devices, profiler=profiler)
    assert set(result.plan.devices) == {"cpu@0", "cpu@1"}
