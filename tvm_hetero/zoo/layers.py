"""Building blocks of the model zoo, in ``relax.frontend.nn``.

Recurrent layers are loop kernels (:mod:`tvm_hetero.ir.recurrent`: a layer's steps run inside
one kernel) or, with ``loop=False``, unrolled over the sequence (TVM 0.27 has no recurrent
op; a strategy that cuts inside the sequence needs the steps apart); attention is
written with matmul / softmax so that every operator shows in the graph, and BatchNorm is taken as
already folded into the convolution bias, as in an inference graph.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_hetero.ir.recurrent import TORCH_ORDER, RecurrentLoop, loop_kernel, pack_weights


def rx(expr: relax.Expr, name: str) -> Tensor:
    """Wrap a raw Relax expression as an ``nn.Tensor``."""
    return op.wrap_nested(expr, name)


class LSTMLayer(nn.Module):
    """One LSTM layer unrolled over ``seq_len`` steps; returns the hidden state of every step."""

    def __init__(self, input_size: int, hidden: int) -> None:
        self.hidden = hidden
        self.ih = nn.Linear(input_size, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden, bias=False)

    def forward(self, steps: list[Tensor]) -> list[Tensor]:
        batch = steps[0].shape[0]
        h = op.zeros((batch, self.hidden), "float32")
        c = op.zeros((batch, self.hidden), "float32")
        out = []
        for x in steps:
            gates = self.ih(x) + self.hh(h)
            i, f, g, o = op.split(gates, 4, axis=1)
            c = op.sigmoid(f) * c + op.sigmoid(i) * op.tanh(g)
            h = op.sigmoid(o) * op.tanh(c)
            out.append(h)
        return out


class GRULayer(nn.Module):
    """One GRU layer unrolled over ``seq_len`` steps; returns the hidden state of every step."""

    def __init__(self, input_size: int, hidden: int) -> None:
        self.hidden = hidden
        self.ih = nn.Linear(input_size, 3 * hidden)
        self.hh = nn.Linear(hidden, 3 * hidden)

    def forward(self, steps: list[Tensor]) -> list[Tensor]:
        batch = steps[0].shape[0]
        h = op.zeros((batch, self.hidden), "float32")
        out = []
        for x in steps:
            xr, xz, xn = op.split(self.ih(x), 3, axis=1)
            hr, hz, hn = op.split(self.hh(h), 3, axis=1)
            r = op.sigmoid(xr + hr)
            z = op.sigmoid(xz + hz)
            n = op.tanh(xn + r * hn)
            h = (1.0 - z) * n + z * h
            out.append(h)
        return out


class LoopLayer(nn.Module):
    """One LSTM or GRU layer as a loop kernel over a ``(seq, batch, features)`` input; the
    same parameters as :class:`LSTMLayer` / :class:`GRULayer` (PyTorch's gate order)."""

    def __init__(self, cell: str, input_size: int, hidden: int) -> None:
        self.cell, self.hidden = cell.upper(), hidden
        gates = {"LSTM": 4, "GRU": 3}[self.cell]
        self.ih = nn.Linear(input_size, gates * hidden)
        self.hh = nn.Linear(hidden, gates * hidden, bias=self.cell == "GRU")

    def forward(self, x: Tensor) -> Tensor:
        seq, batch = x.shape[0], x.shape[1]
        spec = RecurrentLoop(self.cell, seq, batch, self.hidden, order=TORCH_ORDER[self.cell])
        rt = rx(pack_weights(relax.op.permute_dims(self.hh.weight._expr), spec), "rt")
        width = spec.gates * self.hidden
        rb = self.hh.bias if self.hh.bias is not None else op.zeros((width,), "float32")
        state = op.zeros((batch, self.hidden), "float32")
        y, _, _ = op.tensor_ir_op(
            loop_kernel(spec),
            f"{self.cell.lower()}_loop",
            args=[self.ih(x), rt, rb, state, state],
            out=[
                Tensor.placeholder((seq, batch, self.hidden), "float32"),
                Tensor.placeholder((batch, self.hidden), "float32"),
                Tensor.placeholder((batch, self.hidden), "float32"),
            ],
        )
        return y


class StackedRNN(nn.Module):
    """``num_layers`` LSTM or GRU layers over a ``(batch, seq, features)`` input: :meth:`last`
    or :meth:`flat` reads the hidden states. ``loop``: each layer one loop kernel, else
    unrolled."""

    def __init__(
        self, cell: str, input_size: int, hidden: int, num_layers: int, loop: bool = True
    ) -> None:
        sizes = [input_size] + [hidden] * (num_layers - 1)
        if loop:
            self.layers = nn.ModuleList([LoopLayer(cell, s, hidden) for s in sizes])
        else:
            layer = {"lstm": LSTMLayer, "gru": GRULayer}[cell]
            self.layers = nn.ModuleList([layer(s, hidden) for s in sizes])
        self.loop = loop

    def last(self, x: Tensor) -> Tensor:
        """The hidden state of the last step, ``(batch, hidden)``."""
        if self.loop:
            y = self._loops(x)
            seq = y.shape[0]
            return op.squeeze(rx(relax.op.strided_slice(y._expr, [0], [seq - 1], [seq]), "last"), 0)
        return self._unrolled(x)[-1]

    def flat(self, x: Tensor) -> Tensor:
        """Every step's hidden state, ``(seq * batch, hidden)`` in step order."""
        if self.loop:
            y = self._loops(x)
            return op.reshape(y, (y.shape[0] * y.shape[1], y.shape[2]))
        return op.concat(self._unrolled(x), dim=0)

    def _loops(self, x: Tensor) -> Tensor:
        y = op.permute_dims(x, [1, 0, 2])
        for layer in self.layers:
            y = layer(y)
        return y

    def _unrolled(self, x: Tensor) -> list[Tensor]:
        seq = x.shape[1]
        steps = (
            [op.squeeze(s, 1) for s in op.split(x, seq, axis=1)] if seq > 1 else [op.squeeze(x, 1)]
        )
        for layer in self.layers:
            steps = layer(steps)
        return steps


class SelfAttention(nn.Module):
    """Multi-head self-attention (optionally causal) written with matmul and softmax."""

    def __init__(self, hidden: int, heads: int, causal: bool = False) -> None:
        self.heads, self.head_dim, self.causal = heads, hidden // heads, causal
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = op.split(self.qkv(x), 3, axis=2)

        def heads(t: Tensor) -> Tensor:
            return op.permute_dims(op.reshape(t, (b, s, self.heads, self.head_dim)), [0, 2, 1, 3])

        scores = op.matmul(heads(q), op.permute_dims(heads(k), [0, 1, 3, 2]))
        scores = scores * (1.0 / math.sqrt(self.head_dim))
        if self.causal:
            mask = np.triu(np.full((s, s), -1e9, dtype="float32"), 1)
            scores = scores + rx(relax.const(mask), "causal_mask")
        ctx = op.matmul(op.softmax(scores, axis=-1), heads(v))
        ctx = op.reshape(op.permute_dims(ctx, [0, 2, 1, 3]), (b, s, d))
        return self.out(ctx)


class TransformerLayer(nn.Module):
    """Encoder layer: post-norm (BERT) or pre-norm (GPT-2, ViT) attention + GELU FFN."""

    def __init__(self, hidden: int, heads: int, ffn: int, *, pre_norm: bool, causal: bool) -> None:
        self.pre_norm = pre_norm
        self.attn = SelfAttention(hidden, heads, causal)
        self.norm1 = nn.LayerNorm(hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: Tensor) -> Tensor:
        if self.pre_norm:
            x = x + self.attn(self.norm1(x))
            return x + self.fc2(op.gelu(self.fc1(self.norm2(x))))
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.fc2(op.gelu(self.fc1(x))))


class ConvBN(nn.Module):
    """Convolution with bias (BatchNorm folded in) and an optional ReLU."""

    def __init__(
        self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, relu: bool = True
    ) -> None:
        self.relu = relu
        self.conv = nn.Conv2D(cin, cout, k, stride=stride, padding=k // 2, groups=groups)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        return op.relu(y) if self.relu else y


def max_pool(x: Tensor, size: int, stride: int, padding: int) -> Tensor:
    """2-D max pooling."""
    return rx(relax.op.nn.max_pool2d(x._expr, size, stride, padding), "max_pool")


def global_avg_pool(x: Tensor) -> Tensor:
    """Mean over H and W, flattened to ``(batch, channels)``."""
    return rx(relax.op.mean(x._expr, axis=[2, 3]), "global_avg_pool")
