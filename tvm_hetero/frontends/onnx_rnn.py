"""ONNX ``LSTM``, ``GRU`` and ``RNN`` for TVM 0.27's ONNX frontend, which has none.

The input projection of every step is one matrix product over the whole sequence. Then,
by default, each direction is one loop kernel (:mod:`tvm_hetero.ir.recurrent`) that runs the
steps inside: the recurrent product, the gates and the state. A node the loop kernel does not
cover (other activations, ``clip``, peepholes, ``input_forget``, ``sequence_lens``, a GRU
without ``linear_before_reset``, a dtype other than float32), or every node when asked
(``converters(loops=False)``, for a strategy that cuts inside the sequence), is unrolled:
each step adds the recurrent product, applies the gates and keeps the state. Covered: ``direction``
``forward`` / ``reverse`` / ``bidirectional``, ``layout`` 0 and 1, initial states given or
absent, ``sequence_lens`` (steps past a sequence's length keep its state and write zeros, in
either direction), peepholes, ``clip``, ``input_forget``, GRU's ``linear_before_reset``, and
every activation the specification lists with its ``activation_alpha`` / ``activation_beta``
(consumed in order by the activations that take them). A sequence of symbolic length cannot
be unrolled: the error names the input and asks for its shape.

:func:`converters` are added to the frontend's table for the span of one import
(:func:`tvm_hetero.frontends.load.onnx_converters`; the frontend reads ``_get_convert_map()``
for every node).

Both forms return ONNX's outputs: ``Y (seq, directions, batch, hidden)``, ``Y_h`` and
``Y_c``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from tvm_hetero.ir.recurrent import RecurrentLoop, loop_kernel, pack_weights

Expr = relax.Expr
Activation = Callable[[relax.BlockBuilder, Expr], Expr]

# name: (takes alpha, takes beta, default alpha, default beta)
ACTIVATIONS: dict[str, tuple[bool, bool, float, float]] = {
    "relu": (False, False, 0.0, 0.0),
    "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}
"""The activations ONNX's recurrent operators allow (lower-case), with their parameters."""


@dataclass(frozen=True)
class Cell:
    """What distinguishes the three operators.

    Attributes
    ----------
    op : str
        ``LSTM``, ``GRU`` or ``RNN``.
    gates : int
        Blocks of ``hidden_size`` rows in ``W`` and ``R``.
    activations : tuple of str
        The default activations of one direction.
    states : int
        State outputs after ``Y`` (``Y_h``, and ``Y_c`` for LSTM).
    """

    op: str
    gates: int
    activations: tuple[str, ...]
    states: int


CELLS = {
    "LSTM": Cell("LSTM", 4, ("Sigmoid", "Tanh", "Tanh"), 2),
    "GRU": Cell("GRU", 3, ("Sigmoid", "Tanh"), 1),
    "RNN": Cell("RNN", 1, ("Tanh",), 1),
}


def _error(cell: Cell, what: str) -> tvm.error.OpAttributeUnImplemented:
    return tvm.error.OpAttributeUnImplemented(f"ONNX {cell.op}: {what}")


def _const(value: float, dtype: str) -> Expr:
    return relax.const(value, dtype)


def activation(name: str, alpha: float, beta: float, dtype: str) -> Activation:
    """``x -> f(x)`` for the ONNX activation ``name`` with its parameters."""
    op, a, b = relax.op, _const(alpha, dtype), _const(beta, dtype)
    zero, one = _const(0.0, dtype), _const(1.0, dtype)
    body: dict[str, Callable[[Expr], Expr]] = {
        "relu": op.nn.relu,
        "tanh": op.tanh,
        "sigmoid": op.sigmoid,
        "affine": lambda x: op.add(op.multiply(x, a), b),
        "leakyrelu": lambda x: op.where(op.less(x, zero), op.multiply(x, a), x),
        "thresholdedrelu": lambda x: op.where(op.greater(x, a), x, zero),
        "scaledtanh": lambda x: op.multiply(a, op.tanh(op.multiply(x, b))),
        "hardsigmoid": lambda x: op.minimum(op.maximum(op.add(op.multiply(x, a), b), zero), one),
        "elu": lambda x: op.where(op.less(x, zero), op.multiply(a, op.subtract(op.exp(x), one)), x),
        "softsign": lambda x: op.divide(x, op.add(op.abs(x), one)),
        "softplus": lambda x: op.log(op.add(op.exp(x), one)),
    }
    fn = body[name]
    return lambda bb, x: bb.emit(fn(x))


def activation_names(attr: dict) -> list[str]:
    """The node's ``activations`` attribute as strings (empty when absent)."""
    return [s.decode() if isinstance(s, bytes) else str(s) for s in attr.get("activations", ())]


def activations(cell: Cell, attr: dict, directions: int, dtype: str) -> list[list[Activation]]:
    """Each direction's activations from ``activations`` / ``activation_alpha`` /
    ``activation_beta`` (the cell's defaults where absent)."""
    names = activation_names(attr) or list(cell.activations) * directions
    if len(names) != len(cell.activations) * directions:
        raise _error(cell, f"activations {names}: need {len(cell.activations)} per direction "
                           f"({directions} direction(s))")  # fmt: skip
    alphas, betas = list(attr.get("activation_alpha", ())), list(attr.get("activation_beta", ()))
    out = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise _error(cell, f"activation {name!r} is not one of ONNX's "
                               f"({', '.join(sorted(ACTIVATIONS))})")  # fmt: skip
        takes_alpha, takes_beta, alpha, beta = ACTIVATIONS[key]
        if takes_alpha and alphas:
            alpha = float(alphas.pop(0))
        if takes_beta and betas:
            beta = float(betas.pop(0))
        out.append(activation(key, alpha, beta, dtype))
    return [
        out[k * len(cell.activations) : (k + 1) * len(cell.activations)] for k in range(directions)
    ]


def _dims(expr: Expr) -> list:
    return list(expr.ty.shape.values)


def _take(bb: relax.BlockBuilder, x: Expr, axis: int, index: int) -> Expr:
    """``x[..., index, ...]`` along ``axis``, that axis dropped."""
    part = relax.op.strided_slice(x, axes=[axis], begin=[index], end=[index + 1])
    return bb.emit(relax.op.squeeze(part, axis=[axis]))


def _rows(bb: relax.BlockBuilder, x: Expr, axis: int, parts: int) -> list[Expr]:
    """``x`` cut into ``parts`` equal blocks along ``axis``: one slice each, not a ``split``
    (a tuple-valued kernel that nothing fuses into: a GRU step's gates were two kernel calls
    and six tensors more than the slices that ``FuseOps`` folds into the gates' arithmetic)."""
    if parts == 1:
        return [x]
    size = int(_dims(x)[axis]) // parts
    return [
        bb.emit(relax.op.strided_slice(x, axes=[axis], begin=[k * size], end=[(k + 1) * size]))
        for k in range(parts)
    ]


@dataclass
class _Direction:
    """One direction's weights (already cut to it) and activations."""

    w: Expr  # (gates * hidden, input)
    r: Expr  # (gates * hidden, hidden)
    wb: Expr | None  # (gates * hidden,)
    rb: Expr | None
    p: Expr | None  # (3 * hidden,) LSTM peepholes i, o, f
    acts: list[Activation]
    reverse: bool
    # per-gate pieces of wb, rb and p, cut once for every step: each cut of a constant is a
    # kernel FoldConstant builds and runs, and a GRU's 64 steps x 6 cuts took 27 s
    wb_gates: list[Expr] | None = None
    rb_gates: list[Expr] | None = None
    p_gates: list[Expr] | None = None


@dataclass(frozen=True)
class _Options:
    """A node's attributes, checked."""

    hidden: int
    directions: int
    reverse_only: bool
    layout: int
    clip: float | None
    input_forget: bool
    linear_before_reset: bool
    dtype: str

    @classmethod
    def parse(cls, cell: Cell, attr: dict, dtype: str) -> _Options:
        if "hidden_size" not in attr:
            raise _error(cell, "attribute hidden_size is required")
        direction = attr.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        if direction not in ("forward", "reverse", "bidirectional"):
            raise _error(cell, f"direction {direction!r} is not forward, reverse or bidirectional")
        layout = int(attr.get("layout", 0))
        if layout not in (0, 1):
            raise _error(cell, f"layout {layout} is not 0 or 1")
        return cls(
            int(attr["hidden_size"]), 2 if direction == "bidirectional" else 1,
            direction == "reverse", layout, float(attr["clip"]) if "clip" in attr else None,
            bool(int(attr.get("input_forget", 0))), bool(int(attr.get("linear_before_reset", 0))),
            dtype,
        )  # fmt: skip


class _Recurrent(onnx_frontend.OnnxOpConverter):
    """Shared unrolling of the three operators; subclasses set ``cell`` and define ``step``,
    a classmethod ``step(bb, d, x_t, states, rt, bias, opt)``: the new states (``H`` first)
    from the projected input ``x_t``, the transposed recurrent weights ``rt`` (as
    ``recurrent_weights`` cut them, once per direction) and the summed bias (``None`` for GRU,
    whose biases stay apart)."""

    cell: Cell
    step: ClassVar[Callable[..., list[Expr]]]
    loops: ClassVar[bool] = True  # set by ``registered``

    @classmethod
    def loopable(cls, attr: dict, opt: _Options, p: Expr | None, lens: Expr | None) -> bool:
        """Whether a loop kernel computes this node: the cell's default activations, float32,
        and none of ``clip``, peepholes, ``input_forget``, ``sequence_lens``; a GRU with
        ``linear_before_reset`` (as PyTorch exports it)."""
        given = activation_names(attr)
        default = [a.lower() for a in cls.cell.activations] * opt.directions
        return (
            cls.loops
            and opt.dtype == "float32"
            and (not given or [a.lower() for a in given] == default)
            and opt.clip is None
            and p is None
            and lens is None
            and not opt.input_forget
            and (cls.cell.op != "GRU" or opt.linear_before_reset)
        )

    @classmethod
    def recurrent_weights(cls, bb: relax.BlockBuilder, rt: Expr, opt: _Options) -> Any:
        """What ``step`` gets as ``rt``: the transposed recurrent weights, whole."""
        return rt

    @classmethod
    def _impl_v7(cls, bb: relax.BlockBuilder, inputs: Sequence, attr: dict, params) -> Expr:
        cell = cls.cell
        x, w, r, b, lens, h0 = (inputs[k] for k in range(6))
        c0, p = (inputs[6], inputs[7]) if cell.op == "LSTM" else (None, None)
        opt = _Options.parse(cell, attr, str(x.ty.dtype))
        if opt.layout == 1:  # (batch, seq, input) -> (seq, batch, input); states (batch, dirs, h)
            x, h0, c0 = (
                bb.emit(relax.op.permute_dims(v, [1, 0, 2])) if v is not None else None
                for v in (x, h0, c0)
            )
        seq, batch, features = _dims(x)
        if not isinstance(seq, tvm.tirx.IntImm):
            raise _error(cell, f"the sequence length of input X is symbolic ({seq}); give "
                               "the model's input shapes (--input-shape NAME:DxDxD)")  # fmt: skip
        seq = int(seq)
        acts = activations(cell, attr, opt.directions, opt.dtype)
        run = cls._loop if cls.loopable(attr, opt, p, lens) else cls._run
        # the input projection of every step and direction: one product over the sequence
        flat = bb.emit(relax.op.reshape(x, [seq * batch, features]))
        results = []
        for k in range(opt.directions):
            wk, rk = _take(bb, w, 0, k), _take(bb, r, 0, k)
            wb, rb = _rows(bb, _take(bb, b, 0, k), 0, 2) if b is not None else (None, None)
            pk = _take(bb, p, 0, k) if p is not None else None
            d = _Direction(
                wk, rk, wb, rb, pk, acts[k], opt.reverse_only or k == 1,
                *(_rows(bb, v, 0, cell.gates) if v is not None else None for v in (wb, rb)),
                _rows(bb, pk, 0, 3) if pk is not None else None,
            )  # fmt: skip
            xw = bb.emit(relax.op.matmul(flat, relax.op.permute_dims(wk)))
            xw = bb.emit(relax.op.reshape(xw, [seq, batch, cell.gates * opt.hidden]))
            states = [
                _take(bb, s, 0, k) if s is not None
                else bb.emit(relax.op.zeros((batch, opt.hidden), opt.dtype))
                for s in (h0, c0)[: cell.states]
            ]  # fmt: skip
            results.append(run(bb, d, xw, states, lens, opt))
        y = bb.emit(relax.op.stack([res[0] for res in results], axis=1))  # (seq, dirs, b, h)
        finals = [
            bb.emit(relax.op.stack([res[1][s] for res in results], axis=0))
            for s in range(cell.states)
        ]
        if opt.layout == 1:
            y = bb.emit(relax.op.permute_dims(y, [2, 0, 1, 3]))
            finals = [bb.emit(relax.op.permute_dims(f, [1, 0, 2])) for f in finals]
        return relax.Tuple([y, *finals])

    @classmethod
    def _run(
        cls, bb: relax.BlockBuilder, d: _Direction, xw: Expr, states: list[Expr],
        lens: Expr | None, opt: _Options,
    ) -> tuple[Expr, list[Expr]]:  # fmt: skip
        """Every step of one direction, unrolled: its outputs ``(seq, batch, hidden)`` in time
        order and its last states."""
        rt = cls.recurrent_weights(bb, bb.emit(relax.op.permute_dims(d.r)), opt)
        bias = None
        if d.wb is not None and cls.cell.op != "GRU":
            bias = bb.emit(relax.op.add(d.wb, d.rb))
        seq = int(_dims(xw)[0])
        outputs: list[Expr | None] = [None] * seq
        zero = None
        # the steps' inputs as one split, not a slice each: a slice bakes its step into the
        # kernel it fuses into, and 64 steps made 64 different gate kernels (a GRU took 79 s
        # to compile); a split's items make every step's kernel the same one
        pieces = bb.emit(relax.op.split(xw, seq, axis=0)) if seq > 1 else relax.Tuple([xw])
        for t in reversed(range(seq)) if d.reverse else range(seq):
            x_t = bb.emit(relax.op.squeeze(bb.emit(relax.TupleGetItem(pieces, t)), axis=[0]))
            new = cls.step(bb, d, x_t, states, rt, bias, opt)
            if lens is not None:  # a step past a sequence's end keeps its state, writes zeros
                now = _const(t, str(lens.ty.dtype))
                live = bb.emit(relax.op.expand_dims(relax.op.less(now, lens), 1))
                new = [
                    bb.emit(relax.op.where(live, n, s)) for n, s in zip(new, states, strict=True)
                ]
                zero = zero if zero is not None else bb.emit(relax.op.zeros_like(new[0]))
                outputs[t] = bb.emit(relax.op.where(live, new[0], zero))
            else:
                outputs[t] = new[0]
            states = new
        return bb.emit(relax.op.stack(outputs, axis=0)), states

    @classmethod
    def _loop(
        cls, bb: relax.BlockBuilder, d: _Direction, xw: Expr, states: list[Expr],
        lens: Expr | None, opt: _Options,
    ) -> tuple[Expr, list[Expr]]:  # fmt: skip
        """One direction as one loop kernel: ``(y, last states)`` as :meth:`_run`'s."""
        del lens  # a node with sequence_lens is not loopable
        seq, batch = (int(v) for v in _dims(xw)[:2])
        spec = RecurrentLoop(cls.cell.op, seq, batch, opt.hidden, d.reverse)
        width = cls.cell.gates * opt.hidden
        zeros = relax.op.zeros((width,), opt.dtype)
        if cls.cell.op == "GRU":  # the recurrent bias stays apart (r * (h @ R_h + rb_h))
            rb = d.rb if d.rb is not None else zeros
            xw = bb.emit(relax.op.add(xw, d.wb)) if d.wb is not None else xw
        else:
            rb = relax.op.add(d.wb, d.rb) if d.wb is not None else zeros
        h0 = states[0]
        c0 = states[1] if len(states) > 1 else relax.op.zeros((batch, opt.hidden), opt.dtype)
        kernel = bb.add_func(loop_kernel(spec), f"{cls.cell.op.lower()}_loop")
        rt = bb.emit(pack_weights(relax.op.permute_dims(d.r), spec))
        state = relax.TensorType((batch, opt.hidden), opt.dtype)
        outputs = [relax.TensorType((seq, batch, opt.hidden), opt.dtype), state, state]
        out = bb.emit(relax.call_tir(kernel, [xw, rt, bb.emit(rb), h0, bb.emit(c0)], outputs))
        items = [bb.emit(relax.TupleGetItem(out, k)) for k in range(3)]
        return items[0], items[1 : 1 + cls.cell.states]


def _gate(bb: relax.BlockBuilder, act: Activation, pre: Expr, opt: _Options) -> Expr:
    """``act`` of a gate's pre-activation, clipped to ``[-clip, clip]`` first if asked."""
    if opt.clip is not None:
        c = _const(opt.clip, opt.dtype)
        pre = bb.emit(relax.op.minimum(relax.op.maximum(pre, relax.op.negative(c)), c))
    return act(bb, pre)


class LSTM(_Recurrent):
    """ONNX ``LSTM`` (gates ``i, o, f, c``; peepholes ``i, o, f``)."""

    cell = CELLS["LSTM"]

    @classmethod
    def step(cls, bb, d, x_t, states, rt, bias, opt):
        h, c = states
        f_act, g_act, h_act = d.acts
        gates = relax.op.add(x_t, relax.op.matmul(h, rt))
        gates = bb.emit(relax.op.add(gates, bias) if bias is not None else gates)
        i, o, f, g = _rows(bb, gates, 1, 4)
        pi = po = pf = None
        if d.p_gates is not None:
            pi, po, pf = d.p_gates
            i = bb.emit(relax.op.add(i, relax.op.multiply(pi, c)))
            f = bb.emit(relax.op.add(f, relax.op.multiply(pf, c)))
        i = _gate(bb, f_act, i, opt)
        if opt.input_forget:
            f = bb.emit(relax.op.subtract(_const(1.0, opt.dtype), i))
        else:
            f = _gate(bb, f_act, f, opt)
        g = _gate(bb, g_act, g, opt)
        c = bb.emit(relax.op.add(relax.op.multiply(f, c), relax.op.multiply(i, g)))
        if po is not None:
            o = bb.emit(relax.op.add(o, relax.op.multiply(po, c)))
        o = _gate(bb, f_act, o, opt)
        h = bb.emit(relax.op.multiply(o, h_act(bb, c)))
        return [h, c]


class GRU(_Recurrent):
    """ONNX ``GRU`` (gates ``z, r, h``; ``linear_before_reset`` as PyTorch exports it)."""

    cell = CELLS["GRU"]

    @classmethod
    def recurrent_weights(cls, bb: relax.BlockBuilder, rt: Expr, opt: _Options) -> Any:
        """``rt`` whole with ``linear_before_reset`` (``h`` meets all three gates' weights),
        else the z and r columns apart from the h columns (``r * h`` meets the latter)."""
        if opt.linear_before_reset:
            return rt
        cut = 2 * opt.hidden
        return (
            bb.emit(relax.op.strided_slice(rt, axes=[1], begin=[0], end=[cut])),
            bb.emit(relax.op.strided_slice(rt, axes=[1], begin=[cut], end=[3 * opt.hidden])),
        )

    @classmethod
    def step(cls, bb, d, x_t, states, rt, bias, opt):
        (h,) = states
        f_act, g_act = d.acts
        xz, xr, xh = _rows(bb, x_t, 1, 3)
        wbz = wbr = wbh = rbz = rbr = rbh = None
        if d.wb_gates is not None:
            wbz, wbr, wbh = d.wb_gates
            rbz, rbr, rbh = d.rb_gates

        def pre(x_part: Expr, recurrent: Expr, *biases: Expr | None) -> Expr:
            out = relax.op.add(x_part, recurrent)
            for bias_part in biases:
                if bias_part is not None:
                    out = relax.op.add(out, bias_part)
            return bb.emit(out)

        # one product of h with the gates that read it (all three with linear_before_reset,
        # else z and r): one kernel a step instead of three
        if opt.linear_before_reset:
            hz, hr, hh = _rows(bb, bb.emit(relax.op.matmul(h, rt)), 1, 3)
        else:
            zr_w, rh_w = rt
            hz, hr = _rows(bb, bb.emit(relax.op.matmul(h, zr_w)), 1, 2)
        z = _gate(bb, f_act, pre(xz, hz, wbz, rbz), opt)
        r = _gate(bb, f_act, pre(xr, hr, wbr, rbr), opt)
        if opt.linear_before_reset:
            hh = bb.emit(relax.op.add(hh, rbh) if rbh is not None else hh)
            cand = pre(xh, relax.op.multiply(r, hh), wbh)
        else:
            cand = pre(xh, relax.op.matmul(relax.op.multiply(r, h), rh_w), wbh, rbh)
        cand = _gate(bb, g_act, cand, opt)
        one = _const(1.0, opt.dtype)
        h = bb.emit(
            relax.op.add(
                relax.op.multiply(relax.op.subtract(one, z), cand), relax.op.multiply(z, h)
            )
        )
        return [h]


class RNN(_Recurrent):
    """ONNX ``RNN`` (one gate)."""

    cell = CELLS["RNN"]

    @classmethod
    def step(cls, bb, d, x_t, states, rt, bias, opt):
        (h,) = states
        pre = relax.op.add(x_t, relax.op.matmul(h, rt))
        pre = bb.emit(relax.op.add(pre, bias) if bias is not None else pre)
        return [_gate(bb, d.acts[0], pre, opt)]


CONVERTERS = {"LSTM": LSTM, "GRU": GRU, "RNN": RNN}


def converters(loops: bool = True) -> dict:
    """:data:`CONVERTERS` for the frontend's table; ``loops=False`` unrolls every recurrent
    node."""
    return {name: type(name, (cls,), {"loops": loops}) for name, cls in CONVERTERS.items()}
