"""Zoo models as ONNX files written by PyTorch (seeded random weights, no downloads): what a user
brings, and what ONNX Runtime can run beside us (``tvm-hetero demo`` and ``optimize``).

Each is the PyTorch twin of the zoo entry of the same name and size (the Siamese LSTM of DUET's
Table I, over 16 steps instead of 64; the small BERT encoder), exported by TorchScript tracing
(``dynamo=False``: it needs no ``onnxscript``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

ONNX_MODELS = ("siamese-lstm", "bert-small")
"""Zoo names this module can write as ONNX."""


SIAMESE_STEPS = 16
"""The Siamese LSTM's sequence length here: the paper's 64 steps make every build of it take
about a minute on two cores, and DUET's correction builds a dozen."""


def _siamese(torch: Any, nn: Any) -> tuple[Any, tuple, list[str]]:
    """Two 2-layer LSTM towers (64 -> 128) on two sequences of :data:`SIAMESE_STEPS` steps,
    ``|h1 - h2|`` scored."""

    class Siamese(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.left = nn.LSTM(64, 128, 2, batch_first=True)
            self.right = nn.LSTM(64, 128, 2, batch_first=True)
            self.score = nn.Linear(128, 1)

        def forward(self, a: Any, b: Any) -> Any:
            diff = self.left(a)[0][:, -1] - self.right(b)[0][:, -1]
            return torch.sigmoid(self.score(diff.abs()))

    shape = (1, SIAMESE_STEPS, 64)
    return Siamese(), (torch.randn(*shape), torch.randn(*shape)), ["a", "b"]


def _bert_small(torch: Any, nn: Any) -> tuple[Any, tuple, list[str]]:
    """Four post-norm encoder layers (256 wide, 4 heads, FFN 1024, GELU) over 128 tokens."""

    class Layer(nn.Module):
        def __init__(self, width: int = 256, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)

        def forward(self, x: Any) -> Any:
            batch, seq, width = x.shape
            q, k, v = self.qkv(x).reshape(batch, seq, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            weights = torch.softmax(q @ k.transpose(-1, -2) / (width // self.heads) ** 0.5, -1)
            mixed = (weights @ v).transpose(1, 2).reshape(batch, seq, width)
            x = self.norm1(x + self.out(mixed))
            return self.norm2(x + self.down(nn.functional.gelu(self.up(x))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(30522, 256)
            self.layers = nn.ModuleList(Layer() for _ in range(4))

        def forward(self, ids: Any) -> Any:
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x)
            return x

    return Encoder(), (torch.randint(0, 30522, (1, 128)),), ["input_ids"]


def write_onnx(name: str, path: str | Path) -> Path:
    """Write the zoo model ``name`` (one of :data:`ONNX_MODELS`) as ONNX to ``path``."""
    if name not in ONNX_MODELS:
        raise ValueError(f"no ONNX twin of {name!r}; choose from {', '.join(ONNX_MODELS)}")
    import torch
    from torch import nn

    torch.manual_seed(0)
    module, args, names = {"siamese-lstm": _siamese, "bert-small": _bert_small}[name](torch, nn)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(module.eval(), args, str(path), input_names=names, dynamo=False,
                          opset_version=17)  # fmt: skip
    return path
