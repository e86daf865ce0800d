"""Recurrent layers as loop kernels: a whole LSTM, GRU or RNN direction in one kernel.

Unrolled, a layer is ``seq x gates`` small kernels (the zoo's Siamese LSTM is about 2,000), and
a CPU spends more time starting them than computing. Here the input projection of every step
stays one matrix product over the sequence (``xw``, done outside); the kernel runs the
sequence loop inside: each step adds the recurrent product ``h @ rt`` for every gate at once
(a block of hidden units a thread, the gates' accumulators in vector registers), applies the
gates and keeps the state for the next step.

The kernel's arguments, for a layer of ``G`` gates (4 LSTM, 3 GRU, 1 RNN) and ``H`` units::

    xw (seq, batch, G*H)  rt (packed_shape)  rb (G*H,)  h0 (batch, H)  c0 (batch, H)
    -> y (seq, batch, H)  h_n (batch, H)  c_n (batch, H)

where ``rt`` is the transposed recurrent weights ``R^T (H, G*H)`` packed by
:func:`pack_weights`. One signature serves the three cells (a GRU or RNN passes ``c0``
through to ``c_n``). ``rb`` is added to the recurrent product (a GRU's
``r * (h @ R_h + rb_h)`` needs it apart); biases that are only added go into ``xw`` or
``rb``. ``order`` says which block of ``G*H`` holds which gate: ONNX's (``i o f c``,
``z r h``) or PyTorch's (``i f g o``, ``r z n``).
Activations are the cells' defaults (sigmoid, tanh), computed with the rational tanh that
TOPI's ``fast_tanh`` uses (vectorized; within 1e-6 of ``tanh``).

:func:`loop_kernel` writes the kernel for a CPU or a GPU; the kernel in a module carries
:data:`RECURRENT_ATTR` so that the schedule step writes it again for the device it was placed
on (:func:`retarget`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relax, tirx
from tvm.script import tirx as T

from tvm_hetero.ir.fast_math import TANH_P, TANH_Q, rational

RECURRENT_FORMS = ("loop", "unrolled")
"""How a recurrent layer is built: a loop kernel a direction, or a kernel a step and gate
(``load_model(..., recurrent=...)``, a zoo model's ``recurrent`` setting)."""

RECURRENT_ATTR = "tvm_hetero.recurrent"
"""PrimFunc attribute of a loop kernel: its :class:`RecurrentLoop` as a key string."""

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
"""Gate blocks of each cell."""

ONNX_ORDER = {"LSTM": (0, 1, 2, 3), "GRU": (0, 1, 2), "RNN": (0,)}
"""Block of each gate in ONNX's layout: LSTM ``i o f c``, GRU ``z r h``, RNN ``h``."""

TORCH_ORDER = {"LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2), "RNN": (0,)}
"""The same gates' blocks in PyTorch's layout (LSTM ``i f g o``, GRU ``r z n``)."""

PARALLEL_MACS = 1 << 16
"""Multiply-adds a step from which a CPU kernel's steps run their unit blocks in parallel."""

GPU_THREADS = 1024
"""Most threads of the GPU kernel's one block."""


@dataclass(frozen=True)
class RecurrentLoop:
    """One direction of one recurrent layer, as a loop kernel.

    Attributes
    ----------
    cell : str
        ``LSTM``, ``GRU`` (PyTorch's form: ``linear_before_reset``) or ``RNN`` (tanh).
    seq, batch, hidden : int
        Steps, sequences and hidden units.
    reverse : bool
        Whether the steps run from the last to the first.
    order : tuple of int
        The block of ``G*H`` that holds each gate, in :data:`ONNX_ORDER`'s gate order.
    """

    cell: str
    seq: int
    batch: int
    hidden: int
    reverse: bool = False
    order: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.cell not in GATES:
            raise ValueError(f"cell {self.cell!r} is not one of {', '.join(GATES)}")
        if not self.order:
            object.__setattr__(self, "order", ONNX_ORDER[self.cell])
        if sorted(self.order) != list(range(GATES[self.cell])):
            raise ValueError(f"order {self.order} is not a permutation of the {self.cell} gates")
        if min(self.seq, self.batch, self.hidden) < 1:
            raise ValueError(f"seq, batch and hidden must be positive, not {self}")

    @property
    def gates(self) -> int:
        return GATES[self.cell]

    @property
    def lanes(self) -> int:
        """Units a vector: the widest power of two up to 16 that divides ``hidden``."""
        width = 16
        while self.hidden % width:
            width //= 2
        return width

    @property
    def block(self) -> int:
        """Units a CPU thread computes at once: two vectors when they divide ``hidden``."""
        return self.lanes * (2 if (self.hidden // self.lanes) % 2 == 0 else 1)

    @property
    def packed_shape(self) -> tuple[int, int, int, int]:
        """The kernel's recurrent weights ``(blocks, hidden, gates, block)``: a block's
        weights in one run of memory (:func:`pack_weights`)."""
        return (self.hidden // self.block, self.hidden, self.gates, self.block)

    @property
    def flops(self) -> int:
        """Floating-point operations: the recurrent products, and about 20 a gate value for
        its bias, activation and state update."""
        return self.seq * self.batch * self.gates * self.hidden * (2 * self.hidden + 20)

    def key(self) -> str:
        """The attribute string :meth:`from_key` reads back."""
        order = "".join(str(k) for k in self.order)
        return (
            f"{self.cell} seq={self.seq} batch={self.batch} hidden={self.hidden} "
            f"reverse={int(self.reverse)} order={order}"
        )

    @classmethod
    def from_key(cls, key: str) -> RecurrentLoop:
        cell, *pairs = str(key).split()
        kv = dict(p.split("=") for p in pairs)
        return cls(
            cell,
            int(kv["seq"]),
            int(kv["batch"]),
            int(kv["hidden"]),
            kv["reverse"] == "1",
            tuple(int(c) for c in kv["order"]),
        )


def pack_weights(rt: relax.Expr, spec: RecurrentLoop) -> relax.Expr:
    """``rt (hidden, gates * hidden)`` in the kernel's layout, :attr:`~RecurrentLoop.
    packed_shape` (a reshape and a transpose, folded away when the weights are constant).
    Measured as above, 16 steps, 2 threads: 49 us a step at 512 units where rows of ``rt``
    took 76, 15 at 256 (18)."""
    blocks, hidden, gates, block = spec.packed_shape
    split = relax.op.reshape(rt, (hidden, gates, blocks, block))
    return relax.op.permute_dims(split, [2, 0, 1, 3])


def _f32(value: float) -> tirx.PrimExpr:
    return tirx.const(value, "float32")


def _let(value: tirx.PrimExpr, body, name: str) -> tirx.PrimExpr:
    var = tirx.Var(name, "float32")
    return tirx.Let(var, value, body(var))


def fast_tanh(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``tanh(x)`` as a ratio of odd / even polynomials on ``[-9, 9]`` (TOPI's ``fast_tanh``,
    squaring no tiny argument: :func:`~tvm_hetero.ir.fast_math.rational`)."""
    clipped = tirx.max(tirx.min(x, _f32(9.0)), _f32(-9.0))
    return _let(clipped, lambda v: rational(v, TANH_P, TANH_Q), "x")


def fast_sigmoid(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``1 / (1 + exp(-x))`` as ``0.5 + 0.5 tanh(x / 2)``."""
    return _f32(0.5) + _f32(0.5) * fast_tanh(x * _f32(0.5))


def loop_kernel(spec: RecurrentLoop, gpu: bool = False) -> tirx.PrimFunc:
    """The loop kernel of ``spec`` for a CPU (vectorized over units, blocks of units in
    parallel for large steps) or a GPU (one block, a thread per unit and sequence), carrying
    :data:`RECURRENT_ATTR`."""
    func = _gpu_kernel(spec) if gpu else _cpu_kernel(spec)
    return func.with_attr(RECURRENT_ATTR, spec.key())


def retarget(func: tirx.PrimFunc, target) -> tirx.PrimFunc:
    """A loop kernel written again for ``target`` (its ``target`` attribute kept), marked
    scheduled."""
    spec = RecurrentLoop.from_key(func.attrs[RECURRENT_ATTR])
    out = loop_kernel(spec, gpu=target.kind.name != "llvm")
    for key in ("target", "global_symbol"):
        if key in func.attrs:
            out = out.with_attr(key, func.attrs[key])
    return out.with_attr("tirx.is_scheduled", True)


def _output(spec: RecurrentLoop, pre, acc, h_prev, c_new):
    """The step's ``h`` from ``pre(gate)`` (that gate's ``xw``), ``acc(gate)`` (its
    ``rb + h @ rt``), the previous ``h`` and, for an LSTM, the new ``c``."""
    if spec.cell == "LSTM":
        return fast_sigmoid(pre(1) + acc(1)) * fast_tanh(c_new)
    if spec.cell == "GRU":
        cand = fast_tanh(pre(2) + fast_sigmoid(pre(1) + acc(1)) * acc(2))
        # z written twice (each with Lets of its own): one Let read twice made TVM's CSE
        # define a variable after its use (a GRU of one step, 16 sequences, 64 units)
        return (_f32(1.0) - fast_sigmoid(pre(0) + acc(0))) * cand + fast_sigmoid(
            pre(0) + acc(0)
        ) * h_prev
    return fast_tanh(pre(0) + acc(0))


def _lstm_cell(pre, acc, c_prev):
    """An LSTM's new ``c`` (gates ``i o f c``)."""
    return fast_sigmoid(pre(2) + acc(2)) * c_prev + fast_sigmoid(pre(0) + acc(0)) * fast_tanh(
        pre(3) + acc(3)
    )


def _cpu_kernel(spec: RecurrentLoop) -> tirx.PrimFunc:
    """A step is, for every ``V x L`` units, the gates' products accumulated in ``G x V``
    vectors over ``k``, then the gates; the units' blocks run in parallel when a step has
    :data:`PARALLEL_MACS` or more. Measured on a 2-core AMD EPYC (AVX2), 16 steps without
    the gates: 128 units, L 16 x V 2, 5.1 us a step (16 x 1 7.0, 8 x 2 6.7); 2 threads 5.0
    us at 128 units, 17.5 at 256 (one 32), 75 at 512 (one 135).
    """
    seq, batch, H, G, order = spec.seq, spec.batch, spec.hidden, spec.gates, spec.order
    L, VL = spec.lanes, spec.block
    V, U, GH, rev, lstm = VL // L, H // VL, G * H, int(spec.reverse), spec.cell == "LSTM"
    blocks = T.parallel if U > 1 and G * H * H * batch >= PARALLEL_MACS else T.serial

    def gates(t, b, j, v, lane, xw, acc):
        return lambda g: xw[t, b, order[g] * H + j], lambda g: acc[order[g], v, lane]

    def new_c(t, b, j, v, lane, xw, acc, c_prev):
        return _lstm_cell(*gates(t, b, j, v, lane, xw, acc), c_prev)

    def new_h(t, b, j, v, lane, xw, acc, h_prev, c_new):
        return _output(spec, *gates(t, b, j, v, lane, xw, acc), h_prev, c_new)

    @T.prim_func(private=True)
    def kernel(
        xw: T.Buffer((seq, batch, GH), "float32"),
        rt: T.Buffer(spec.packed_shape, "float32"),
        rb: T.Buffer((GH,), "float32"),
        h0: T.Buffer((batch, H), "float32"),
        c0: T.Buffer((batch, H), "float32"),
        y: T.Buffer((seq, batch, H), "float32"),
        hn: T.Buffer((batch, H), "float32"),
        cn: T.Buffer((batch, H), "float32"),
    ):
        T.func_attr({"tir.noalias": True})
        h = T.alloc_buffer((2, batch, H), "float32")  # the step's h and the next one's
        for b, j in T.grid(batch, H):
            h[0, b, j] = h0[b, j]
            cn[b, j] = c0[b, j]
        for s in range(seq):
            t = s + rev * (seq - 1 - 2 * s)  # the step's position in the sequence
            for u in blocks(U):
                for b in range(batch):
                    acc = T.alloc_buffer((G, V, L), "float32", scope="local")
                    for g in T.unroll(G):  # unrolled everywhere: acc stays in registers
                        for v in T.unroll(V):
                            for lane in T.vectorized(L):
                                acc[g, v, lane] = rb[g * H + (u * V + v) * L + lane]
                    for k in range(H):
                        for g in T.unroll(G):
                            for v in T.unroll(V):
                                for lane in T.vectorized(L):
                                    acc[g, v, lane] = (
                                        acc[g, v, lane] + h[s % 2, b, k] * rt[u, k, g, v * L + lane]
                                    )
                    for v in T.unroll(V):
                        if lstm:
                            for lane in T.vectorized(L):
                                cn[b, (u * V + v) * L + lane] = new_c(
                                    t,
                                    b,
                                    (u * V + v) * L + lane,
                                    v,
                                    lane,
                                    xw,
                                    acc,
                                    cn[b, (u * V + v) * L + lane],
                                )
                        for lane in T.vectorized(L):
                            y[t, b, (u * V + v) * L + lane] = new_h(
                                t,
                                b,
                                (u * V + v) * L + lane,
                                v,
                                lane,
                                xw,
                                acc,
                                h[s % 2, b, (u * V + v) * L + lane],
                                cn[b, (u * V + v) * L + lane],
                            )
                        for lane in T.vectorized(L):
                            h[(s + 1) % 2, b, (u * V + v) * L + lane] = y[
                                t, b, (u * V + v) * L + lane
                            ]
        for b, j in T.grid(batch, H):
            hn[b, j] = h[seq % 2, b, j]

    return kernel


def _gpu_kernel(spec: RecurrentLoop) -> tirx.PrimFunc:
    """One block of up to :data:`GPU_THREADS` threads, a (sequence, unit) a thread (each
    thread takes every ``GPU_THREADS``-th beyond), ``h`` in shared memory. A step reads
    ``h`` into every thread's gates, then, past a barrier, writes the new ``h`` (TVM's
    ``ThreadSync`` puts the two barriers a step). No barrier sits under a condition: the
    shared ``h`` is padded to whole rounds of threads, loads past the last unit read the
    last unit, and only the stores to global memory are guarded."""
    seq, batch, H, G, order = spec.seq, spec.batch, spec.hidden, spec.gates, spec.order
    N = batch * H
    NT = min(GPU_THREADS, N)
    R, GH, VL, rev = (N + NT - 1) // NT, G * H, spec.block, int(spec.reverse)
    lstm = spec.cell == "LSTM"

    def gates(t, q, xw, acc):
        return lambda g: xw[t, q // H, order[g] * H + q % H], lambda g: acc[order[g]]

    def new_c(t, q, xw, acc, c_prev):
        return _lstm_cell(*gates(t, q, xw, acc), c_prev)

    def new_h(t, q, xw, acc, h_prev, c_new):
        return _output(spec, *gates(t, q, xw, acc), h_prev, c_new)

    @T.prim_func(private=True)
    def kernel(
        xw: T.Buffer((seq, batch, GH), "float32"),
        rt: T.Buffer(spec.packed_shape, "float32"),
        rb: T.Buffer((GH,), "float32"),
        h0: T.Buffer((batch, H), "float32"),
        c0: T.Buffer((batch, H), "float32"),
        y: T.Buffer((seq, batch, H), "float32"),
        hn: T.Buffer((batch, H), "float32"),
        cn: T.Buffer((batch, H), "float32"),
    ):
        T.func_attr({"tir.noalias": True})
        tx = T.launch_thread("threadIdx.x", NT)
        h = T.alloc_buffer((R * NT,), "float32", scope="shared")  # unit q = b * H + j
        c = T.alloc_buffer((R,), "float32", scope="local")
        fresh = T.alloc_buffer((R,), "float32", scope="local")
        acc = T.alloc_buffer((G,), "float32", scope="local")
        for r in range(R):
            h[tx + r * NT] = h0[T.min(tx + r * NT, N - 1) // H, T.min(tx + r * NT, N - 1) % H]
            c[r] = c0[T.min(tx + r * NT, N - 1) // H, T.min(tx + r * NT, N - 1) % H]
        for s in range(seq):
            t = s + rev * (seq - 1 - 2 * s)  # the step's position in the sequence
            for r in range(R):
                for g in T.unroll(G):
                    acc[g] = rb[g * H + T.min(tx + r * NT, N - 1) % H]
                for k in range(H):
                    for g in T.unroll(G):
                        acc[g] = (
                            acc[g]
                            + h[T.min(tx + r * NT, N - 1) // H * H + k]
                            * rt[
                                T.min(tx + r * NT, N - 1) % H // VL,
                                k,
                                g,
                                T.min(tx + r * NT, N - 1) % VL,
                            ]
                        )
                if lstm:
                    c[r] = new_c(t, T.min(tx + r * NT, N - 1), xw, acc, c[r])
                fresh[r] = new_h(t, T.min(tx + r * NT, N - 1), xw, acc, h[tx + r * NT], c[r])
                if tx + r * NT < N:
                    y[t, (tx + r * NT) // H, (tx + r * NT) % H] = fresh[r]
            for r in range(R):
                h[tx + r * NT] = fresh[r]
        for r in range(R):
            if tx + r * NT < N:
                hn[(tx + r * NT) // H, (tx + r * NT) % H] = fresh[r]
                cn[(tx + r * NT) // H, (tx + r * NT) % H] = c[r]

    return kernel
