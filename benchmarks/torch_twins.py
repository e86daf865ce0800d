"""Torch twins of zoo models, for ONNX Runtime beside our builds of them: the architectures and
shapes the zoo's builders make from the same settings (read through ``build_config``), their own
random weights (timings do not depend on weight values)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent / "cpu_kernels"))
from onnx_models import EncoderLayer, ResNet18


class StackedRNN(nn.Module):
    """The last layer's hidden state at the last step of a stacked LSTM or GRU (batch first)."""

    def __init__(self, cell: str, inp: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.rnn = getattr(nn, cell.upper())(inp, hidden, layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0][:, -1]


class TextEncoder(nn.Module):
    """Token and position embeddings, their norm, and post-norm encoder layers (BERT)."""

    def __init__(self, vocab: int, seq_len: int, hidden: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Parameter(torch.randn(seq_len, hidden))
        self.norm = nn.LayerNorm(hidden)
        self.layers = nn.Sequential(*[EncoderLayer(hidden, heads) for _ in range(layers)])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layers(self.norm(self.tok(ids) + self.pos))


class MobileNetV1(nn.Module):
    """MobileNet v1 (BatchNorm folded): a 3x3 stem, depthwise + pointwise blocks, classifier."""

    BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
              (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))  # fmt: skip

    def __init__(self, width: float, blocks: int, classes: int) -> None:
        super().__init__()

        def ch(c: int) -> int:
            return max(8, int(c * width))

        def conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> list:
            return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups), nn.ReLU()]

        layers, cin = conv(3, ch(32), 3, 2), ch(32)
        for cout, stride in self.BLOCKS[:blocks]:
            layers += conv(cin, cin, 3, stride, groups=cin) + conv(cin, ch(cout), 1)
            cin = ch(cout)
        self.layers, self.fc = nn.Sequential(*layers), nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layers(x).mean(dim=(2, 3)))


class WideAndDeep(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.wide = nn.Linear(cfg["wide"], 1)
        self.embed = nn.Linear(cfg["dense"], cfg["embedding"])
        first, second = cfg["ffn"]
        self.ffn = nn.Sequential(nn.Linear(cfg["embedding"], first), nn.ReLU(),
                                 nn.Linear(first, second))  # fmt: skip
        self.cnn = ResNet18()
        self.rnn = StackedRNN("lstm", cfg["rnn_input"], cfg["rnn_hidden"], cfg["rnn_layers"])
        self.merge = nn.Linear(1 + second + 1000 + cfg["rnn_hidden"], 1)

    def forward(self, wide, dense, image, seq):
        parts = [self.wide(wide), self.ffn(torch.relu(self.embed(dense))), self.cnn(image),
                 self.rnn(seq)]  # fmt: skip
        return torch.sigmoid(self.merge(torch.cat(parts, dim=1)))


class Siamese(nn.Module):
    def __init__(self, inp: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.left = StackedRNN("lstm", inp, hidden, layers)
        self.right = StackedRNN("lstm", inp, hidden, layers)
        self.score = nn.Linear(hidden, 1)

    def forward(self, a, b):
        return torch.sigmoid(self.score(torch.abs(self.left(a) - self.right(b))))


class MtDnn(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        hidden, lstm = cfg["hidden"], cfg["lstm_hidden"]
        self.encoder = TextEncoder(cfg["vocab"], cfg["seq_len"], hidden, cfg["layers"],
                                   cfg["heads"])  # fmt: skip
        self.heads = nn.ModuleList(StackedRNN("lstm", hidden, lstm, cfg["lstm_layers"])
                                   for _ in cfg["tags"])  # fmt: skip
        self.tags = nn.ModuleList(nn.Linear(lstm, t) for t in cfg["tags"])

    def forward(self, ids):
        x = self.encoder(ids)
        return tuple(
            torch.softmax(t(h(x)), dim=-1) for h, t in zip(self.heads, self.tags, strict=True)
        )


def _rnn(cell: str) -> Callable[[dict], tuple]:
    def build(c: dict) -> tuple:
        net = StackedRNN(cell, c["input_size"], c["hidden"], c["num_layers"])
        return net, (torch.randn(c["batch"], c["seq_len"], c["input_size"]),)

    return build


def _bert(c: dict) -> tuple:
    net = TextEncoder(c["vocab"], c["seq_len"], c["hidden"], c["layers"], c["heads"])
    return net, (torch.randint(0, c["vocab"], (c["batch"], c["seq_len"])),)


def _resnet18(c: dict) -> tuple:
    return ResNet18(), (torch.randn(c["batch"], 3, c["image"], c["image"]),)


def _mobilenet(c: dict) -> tuple:
    net = MobileNetV1(c["width"], c["blocks"], c["classes"])
    return net, (torch.randn(c["batch"], 3, c["image"], c["image"]),)


def _wide_deep(c: dict) -> tuple:
    b = c["batch"]
    return WideAndDeep(c), (torch.randn(b, c["wide"]), torch.randn(b, c["dense"]),
                            torch.randn(b, 3, c["image"], c["image"]),
                            torch.randn(b, c["rnn_seq"], c["rnn_input"]))  # fmt: skip


def _siamese(c: dict) -> tuple:
    shape = (c["batch"], c["seq_len"], c["input_size"])
    net = Siamese(c["input_size"], c["hidden"], c["num_layers"])
    return net, (torch.randn(*shape), torch.randn(*shape))


def _mtdnn(c: dict) -> tuple:
    return MtDnn(c), (torch.randint(0, c["vocab"], (c["batch"], c["seq_len"])),)


TWINS: dict[str, Callable[[dict], tuple]] = {
    "lstm": _rnn("lstm"), "gru": _rnn("gru"), "bert-small": _bert, "bert-base": _bert,
    "resnet18": _resnet18, "mobilenet": _mobilenet, "wide-deep": _wide_deep,
    "siamese-lstm": _siamese, "mt-dnn": _mtdnn,
}  # fmt: skip
"""Zoo models with a twin: their builders from the zoo's settings."""


def onnx_twin(spec: str, out: Path, **overrides) -> tuple[Path, dict]:
    """The twin of zoo model ``spec`` (``NAME[:PRESET]`` with the zoo's ``overrides``) as ONNX
    in ``out``, and example feeds named as the zoo model's inputs."""
    from tvm_hetero.zoo import ZOO, build_config, parse_name

    name, _ = parse_name(spec)
    if name not in TWINS:
        raise ValueError(f"no torch twin of {name!r}; twins: {', '.join(TWINS)}")
    cfg = build_config(spec, **overrides)
    if name in ("resnet18", "wide-deep"):
        resnet = cfg.get("cnn", cfg)
        if resnet["stages"] != [2, 2, 2, 2] or resnet["width"] != 64:
            raise ValueError(f"the twin of {spec} is ResNet-18 at width 64 only")
    torch.manual_seed(0)
    net, args = TWINS[name](cfg)
    names = [s.name for s in ZOO[name].builder(**cfg)[1]]  # the zoo model's inputs, unbuilt
    path = out / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), args, str(path), input_names=names, dynamo=False)
    return path, {n: a.numpy() for n, a in zip(names, args, strict=True)}
