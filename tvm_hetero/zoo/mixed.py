"""Multi-branch models: an MLP and Wide-and-Deep (DUET Table I)."""

from __future__ import annotations

import itertools

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_hetero.frontends.model import InputSpec
from tvm_hetero.zoo.cnn import ResNet
from tvm_hetero.zoo.layers import StackedRNN


class MLP(nn.Module):
    """A ReLU multi-layer perceptron."""

    def __init__(self, sizes: list[int]) -> None:
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in itertools.pairwise(sizes)])

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = op.relu(x) if i < len(self.layers) - 1 else x
        return x


class WideAndDeep(nn.Module):
    """DUET's Wide-and-Deep: wide linear, embedding FFN, ResNet and stacked-LSTM branches, merged.

    The four branches are independent until the merge, which is what DUET's phased scheduling
    spreads over CPU and GPU.
    """

    def __init__(
        self,
        wide: int,
        dense: int,
        embedding: int,
        ffn: list[int],
        cnn: dict,
        rnn_input: int,
        rnn_hidden: int,
        rnn_layers: int,
        loop: bool = True,
    ) -> None:
        self.wide = nn.Linear(wide, 1)
        self.embed = nn.Linear(dense, embedding)
        self.ffn = MLP([embedding, *ffn])
        self.cnn = ResNet(**cnn)
        self.rnn = StackedRNN("lstm", rnn_input, rnn_hidden, rnn_layers, loop)
        self.merge = nn.Linear(1 + ffn[-1] + cnn["classes"] + rnn_hidden, 1)

    def forward(self, wide: Tensor, dense: Tensor, image: Tensor, seq: Tensor) -> Tensor:
        branches = [
            self.wide(wide),
            self.ffn(op.relu(self.embed(dense))),
            self.cnn(image),
            self.rnn.last(seq),
        ]
        return op.sigmoid(self.merge(op.concat(branches, dim=1)))


def build_mlp(batch: int, sizes: list[int]):
    """An MLP and its input ``x: (batch, sizes[0])``."""
    return MLP(sizes), [InputSpec("x", (batch, sizes[0]), "float32")]


def build_wide_deep(
    batch: int,
    wide: int,
    dense: int,
    embedding: int,
    ffn: list[int],
    cnn: dict,
    image: int,
    rnn_input: int,
    rnn_seq: int,
    rnn_hidden: int,
    rnn_layers: int,
    recurrent: str = "loop",
):
    """Wide-and-Deep and its four inputs."""
    model = WideAndDeep(
        wide, dense, embedding, ffn, cnn, rnn_input, rnn_hidden, rnn_layers, recurrent == "loop"
    )
    return model, [
        InputSpec("wide", (batch, wide), "float32"),
        InputSpec("dense", (batch, dense), "float32"),
        InputSpec("image", (batch, 3, image, image), "float32"),
        InputSpec("seq", (batch, rnn_seq, rnn_input), "float32"),
    ]
