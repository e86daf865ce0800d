"""Recurrent models: stacked LSTM / GRU (EOP Table 3) and the Siamese LSTM (DUET Table I)."""

from __future__ import annotations

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_hetero.frontends.model import InputSpec
from tvm_hetero.zoo.layers import StackedRNN


class RNNModel(nn.Module):
    """Stacked LSTM or GRU; returns the last layer's hidden state at the last step."""

    def __init__(
        self, cell: str, input_size: int, hidden: int, num_layers: int, loop: bool = True
    ) -> None:
        self.rnn = StackedRNN(cell, input_size, hidden, num_layers, loop)

    def forward(self, x: Tensor) -> Tensor:
        return self.rnn.last(x)


class SiameseLSTM(nn.Module):
    """Two stacked-LSTM towers on two sequences, merged by ``|h1 - h2|`` and a linear scorer."""

    def __init__(self, input_size: int, hidden: int, num_layers: int, loop: bool = True) -> None:
        self.left = StackedRNN("lstm", input_size, hidden, num_layers, loop)
        self.right = StackedRNN("lstm", input_size, hidden, num_layers, loop)
        self.score = nn.Linear(hidden, 1)

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        diff = self.left.last(a) - self.right.last(b)
        return op.sigmoid(self.score(op.maximum(diff, op.negative(diff))))


def build_rnn(
    cell: str, batch: int, seq_len: int, input_size: int, hidden: int, num_layers: int,
    recurrent: str = "loop",
):  # fmt: skip
    """An LSTM or GRU stack and its input ``x: (batch, seq_len, input_size)``."""
    return RNNModel(cell, input_size, hidden, num_layers, recurrent == "loop"), [
        InputSpec("x", (batch, seq_len, input_size), "float32")
    ]


def build_siamese(
    batch: int, seq_len: int, input_size: int, hidden: int, num_layers: int,
    recurrent: str = "loop",
):  # fmt: skip
    """The Siamese LSTM and its two sequence inputs."""
    shape = (batch, seq_len, input_size)
    return SiameseLSTM(input_size, hidden, num_layers, recurrent == "loop"), [
        InputSpec("a", shape, "float32"),
        InputSpec("b", shape, "float32"),
    ]
