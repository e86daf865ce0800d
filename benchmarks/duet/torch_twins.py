"""Torch twins of the zoo's DUET models, for ONNX Runtime: same architectures and shapes (DUET
Table I), their own random weights (timings do not depend on weight values)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cpu_kernels"))
from onnx_models import EncoderLayer, ResNet18


class StackedLSTM(nn.Module):
    """The last hidden state of a stacked LSTM over a sequence (batch first)."""

    def __init__(self, inp: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(inp, hidden, layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0][:, -1]


class WideAndDeep(nn.Module):
    def __init__(self, rnn_layers: int = 2) -> None:
        super().__init__()
        self.wide = nn.Linear(363, 1)
        self.embed = nn.Linear(13, 192)
        self.ffn = nn.Sequential(nn.Linear(192, 128), nn.ReLU(), nn.Linear(128, 64))
        self.cnn = ResNet18()
        self.rnn = StackedLSTM(80, 64, rnn_layers)
        self.merge = nn.Linear(1 + 64 + 1000 + 64, 1)

    def forward(self, wide, dense, image, seq):
        parts = [self.wide(wide), self.ffn(torch.relu(self.embed(dense))), self.cnn(image),
                 self.rnn(seq)]  # fmt: skip
        return torch.sigmoid(self.merge(torch.cat(parts, dim=1)))


class Siamese(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.left, self.right = StackedLSTM(64, 128, layers), StackedLSTM(64, 128, layers)

    def forward(self, a, b):
        return torch.exp(-torch.abs(self.left(a) - self.right(b)).sum(dim=1, keepdim=True))


class MtDnn(nn.Module):
    TAGS = (29, 3, 3, 7, 9, 11, 9, 25, 7, 13)

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(30522, 768)
        self.encoder = nn.Sequential(*[EncoderLayer(768, 12) for _ in range(12)])
        self.heads = nn.ModuleList(StackedLSTM(768, 256, 2) for _ in self.TAGS)
        self.tags = nn.ModuleList(nn.Linear(256, t) for t in self.TAGS)

    def forward(self, ids):
        x = self.encoder(self.embed(ids))
        return tuple(
            torch.softmax(t(h(x)), dim=-1) for h, t in zip(self.heads, self.tags, strict=True)
        )


def onnx_twin(
    name: str, out: Path, seq_len: int | None = None, num_layers: int = 2, batch: int = 1
) -> tuple[Path, dict]:
    """The twin of zoo model ``name`` (paper preset; ``seq_len``, and for the Siamese network
    ``num_layers`` and ``batch``, as its zoo settings) as ONNX, and example feeds."""
    torch.manual_seed(0)
    if name == "wide-deep":
        net = WideAndDeep()
        args = (torch.randn(1, 363), torch.randn(1, 13), torch.randn(1, 3, 224, 224),
                torch.randn(1, 1, 80))  # fmt: skip
        names = ["wide", "dense", "image", "seq"]
    elif name == "siamese-lstm":
        steps = seq_len or 64
        net, names = Siamese(num_layers), ["a", "b"]
        args = (torch.randn(batch, steps, 64), torch.randn(batch, steps, 64))
    elif name == "mt-dnn":
        net, args, names = MtDnn(), (torch.randint(0, 30522, (1, seq_len or 32)),), ["ids"]
    else:
        raise ValueError(f"no torch twin of {name!r}")
    path = out / f"{name}.onnx"
    torch.onnx.export(net.eval(), args, str(path), input_names=names, dynamo=False)
    return path, {n: a.numpy() for n, a in zip(names, args, strict=True)}
