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
from onnx_models import BasicBlock


class StackedRNN(nn.Module):
    """The last layer's hidden state at the last step of a stacked LSTM or GRU (batch first)."""

    def __init__(self, cell: str, inp: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.rnn = getattr(nn, cell.upper())(inp, hidden, layers, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0][:, -1]

    def steps(self, x: torch.Tensor) -> torch.Tensor:
        """Every step's hidden state, ``(seq * batch, hidden)`` in step order (MT-DNN's
        taggers, as the zoo's ``StackedRNN.flat``)."""
        y = self.rnn(x)[0].transpose(0, 1)
        return y.reshape(-1, y.shape[-1])


class Layer(nn.Module):
    """The zoo's transformer layer: attention and a GELU FFN, post-norm (BERT) or pre-norm
    (GPT-2, ViT), causal or not."""

    def __init__(self, d: int, heads: int, ffn: int, pre_norm: bool, causal: bool) -> None:
        super().__init__()
        self.heads, self.pre_norm, self.causal = heads, pre_norm, causal
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        if self.causal:
            scores = scores + torch.triu(torch.full((s, s), -1e9), 1)
        return self.out((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attend(self.ln1(x))
            return x + self.ff2(nn.functional.gelu(self.ff1(self.ln2(x))))
        x = self.ln1(x + self.attend(x))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class TextEncoder(nn.Module):
    """Token and position embeddings, their norm, and post-norm encoder layers (BERT)."""

    def __init__(
        self, vocab: int, seq_len: int, hidden: int, layers: int, heads: int, ffn: int
    ) -> None:  # fmt: skip
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Parameter(torch.randn(seq_len, hidden))
        self.norm = nn.LayerNorm(hidden)
        self.layers = nn.Sequential(*[Layer(hidden, heads, ffn, False, False)
                                      for _ in range(layers)])  # fmt: skip

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layers(self.norm(self.tok(ids) + self.pos))


class Gpt2(nn.Module):
    """GPT-2 as the zoo builds it: embeddings, pre-norm causal layers, a final norm and the
    language-model head (no bias)."""

    def __init__(self, c: dict) -> None:
        super().__init__()
        d = c["hidden"]
        self.tok, self.pos = nn.Embedding(c["vocab"], d), nn.Parameter(torch.randn(c["seq_len"], d))
        self.layers = nn.Sequential(*[Layer(d, c["heads"], c["ffn"], True, True)
                                      for _ in range(c["layers"])])  # fmt: skip
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, c["vocab"], bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.layers(self.tok(ids) + self.pos)))


class ViT(nn.Module):
    """The zoo's ViT: patch convolution, class token, pre-norm layers, norm, head on the class
    token."""

    def __init__(self, c: dict) -> None:
        super().__init__()
        d, patches = c["hidden"], (c["image"] // c["patch"]) ** 2
        self.embed = nn.Conv2d(3, d, c["patch"], c["patch"])
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        self.pos = nn.Parameter(torch.randn(patches + 1, d))
        self.layers = nn.Sequential(*[Layer(d, c["heads"], c["ffn"], True, False)
                                      for _ in range(c["layers"])])  # fmt: skip
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, c["classes"])

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.embed(image).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.layers(x))[:, 0])


class Bottleneck(nn.Module):
    """The zoo's bottleneck block: 1x1, 3x3 (strided), 1x1 to four times the width."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.c1, self.c2 = nn.Conv2d(cin, width, 1), nn.Conv2d(width, width, 3, stride, 1)
        self.c3 = nn.Conv2d(width, cout, 1)
        self.down = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c3(torch.relu(self.c2(torch.relu(self.c1(x)))))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet(nn.Module):
    """The zoo's ResNet (BatchNorm folded): a 7x7 stem, max pool, stages of basic or
    bottleneck blocks, global average pool, classifier."""

    def __init__(self, block: str, stages: list[int], width: int, classes: int) -> None:
        super().__init__()
        kind, grow = {"basic": (BasicBlock, 1), "bottleneck": (Bottleneck, 4)}[block]
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], width
        for i, depth in enumerate(stages):
            w = width * 2**i
            for j in range(depth):
                blocks.append(kind(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * grow
        self.blocks, self.fc = nn.Sequential(*blocks), nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


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
        self.cnn = ResNet(**cfg["cnn"])
        self.rnn = StackedRNN("lstm", cfg["rnn_input"], cfg["rnn_hidden"], cfg["rnn_layers"])
        self.merge = nn.Linear(1 + second + cfg["cnn"]["classes"] + cfg["rnn_hidden"], 1)

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
                                   cfg["heads"], cfg["ffn"])  # fmt: skip
        self.heads = nn.ModuleList(StackedRNN("lstm", hidden, lstm, cfg["lstm_layers"])
                                   for _ in cfg["tags"])  # fmt: skip
        self.tags = nn.ModuleList(nn.Linear(lstm, t) for t in cfg["tags"])

    def forward(self, ids):
        x = self.encoder(ids)
        return tuple(
            torch.softmax(t(h.steps(x)), dim=-1) for h, t in zip(self.heads, self.tags, strict=True)
        )


def _rnn(cell: str) -> Callable[[dict], tuple]:
    def build(c: dict) -> tuple:
        net = StackedRNN(cell, c["input_size"], c["hidden"], c["num_layers"])
        return net, (torch.randn(c["batch"], c["seq_len"], c["input_size"]),)

    return build


def _bert(c: dict) -> tuple:
    net = TextEncoder(c["vocab"], c["seq_len"], c["hidden"], c["layers"], c["heads"], c["ffn"])
    return net, (torch.randint(0, c["vocab"], (c["batch"], c["seq_len"])),)


def _resnet(c: dict) -> tuple:
    net = ResNet(c["block"], c["stages"], c["width"], c["classes"])
    return net, (torch.randn(c["batch"], 3, c["image"], c["image"]),)


def _gpt2(c: dict) -> tuple:
    return Gpt2(c), (torch.randint(0, c["vocab"], (c["batch"], c["seq_len"])),)


def _vit(c: dict) -> tuple:
    return ViT(c), (torch.randn(c["batch"], 3, c["image"], c["image"]),)


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
    "resnet18": _resnet, "resnet50": _resnet, "mobilenet": _mobilenet, "wide-deep": _wide_deep,
    "siamese-lstm": _siamese, "mt-dnn": _mtdnn, "gpt2": _gpt2, "vit-base": _vit,
    "vit-large": _vit, "vit-huge": _vit,
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
    torch.manual_seed(0)
    net, args = TWINS[name](cfg)
    names = [s.name for s in ZOO[name].builder(**cfg)[1]]  # the zoo model's inputs, unbuilt
    path = out / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), args, str(path), input_names=names, dynamo=False)
    return path, {n: a.numpy() for n, a in zip(names, args, strict=True)}
