"""Transformer models: BERT (EOP, Lee et al.), GPT-2 (Lee et al.), ViT (EdgePipe), MT-DNN (DUET)."""

from __future__ import annotations

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_hetero.frontends.model import InputSpec
from tvm_hetero.zoo.layers import StackedRNN, TransformerLayer


class TextEncoder(nn.Module):
    """Token + position embeddings and a stack of transformer layers."""

    def __init__(
        self, vocab: int, seq_len: int, hidden: int, layers: int, heads: int, ffn: int, gpt: bool
    ) -> None:
        self.gpt = gpt
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter((seq_len, hidden), "float32")
        self.emb_norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(
            [TransformerLayer(hidden, heads, ffn, pre_norm=gpt, causal=gpt) for _ in range(layers)]
        )
        self.final_norm = nn.LayerNorm(hidden)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.tok(ids) + self.pos
        x = x if self.gpt else self.emb_norm(x)
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x) if self.gpt else x


class BERT(nn.Module):
    """BERT encoder; returns the last hidden states ``(batch, seq, hidden)``."""

    def __init__(self, **cfg: int) -> None:
        self.encoder = TextEncoder(gpt=False, **cfg)

    def forward(self, ids: Tensor) -> Tensor:
        return self.encoder(ids)


class GPT2(nn.Module):
    """GPT-2 decoder (causal, pre-norm) with its language-model head; returns logits."""

    def __init__(self, **cfg: int) -> None:
        self.decoder = TextEncoder(gpt=True, **cfg)
        self.lm_head = nn.Linear(cfg["hidden"], cfg["vocab"], bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        return self.lm_head(self.decoder(ids))


class ViT(nn.Module):
    """Vision transformer: patch embedding, class token, pre-norm encoder, classifier head."""

    def __init__(
        self, image: int, patch: int, hidden: int, layers: int, heads: int, ffn: int, classes: int
    ) -> None:
        self.patches = (image // patch) ** 2
        self.embed = nn.Conv2D(3, hidden, patch, stride=patch)
        self.cls = nn.Parameter((1, 1, hidden), "float32")
        self.pos = nn.Parameter((self.patches + 1, hidden), "float32")
        self.layers = nn.ModuleList(
            [
                TransformerLayer(hidden, heads, ffn, pre_norm=True, causal=False)
                for _ in range(layers)
            ]
        )
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, image: Tensor) -> Tensor:
        b = image.shape[0]
        x = self.embed(image)
        x = op.permute_dims(op.reshape(x, (b, x.shape[1], self.patches)), [0, 2, 1])
        x = op.concat([op.broadcast_to(self.cls, (b, 1, x.shape[2])), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        cls = op.squeeze(op.split(self.norm(x), [1], axis=1)[0], 1)
        return self.head(cls)


class MTDNN(nn.Module):
    """MT-DNN as DUET evaluates it: a shared BERT, then one LSTM tagger head per task.

    Each head is a stacked LSTM over the BERT states and a linear emission layer to its tags; the
    CRF's Viterbi decoding (a sequential argmax, not a tensor program) is left out.
    """

    def __init__(
        self, bert: dict[str, int], lstm_hidden: int, lstm_layers: int, tags: list[int],
        loop: bool = True,
    ) -> None:  # fmt: skip
        self.bert = TextEncoder(gpt=False, **bert)
        self.heads = nn.ModuleList(
            [StackedRNN("lstm", bert["hidden"], lstm_hidden, lstm_layers, loop) for _ in tags]
        )
        self.emit = nn.ModuleList([nn.Linear(lstm_hidden, t) for t in tags])

    def forward(self, ids: Tensor) -> tuple[Tensor, ...]:
        states = self.bert(ids)
        outs = []
        for rnn, emit in zip(self.heads, self.emit, strict=True):
            outs.append(op.softmax(emit(rnn.flat(states)), axis=-1))
        return tuple(outs)


def _text_input(batch: int, seq_len: int, vocab: int) -> list[InputSpec]:
    return [InputSpec("ids", (batch, seq_len), "int32", high=vocab)]


def build_bert(
    batch: int, seq_len: int, vocab: int, hidden: int, layers: int, heads: int, ffn: int
):
    """BERT encoder and its token-id input."""
    cfg = dict(vocab=vocab, seq_len=seq_len, hidden=hidden, layers=layers, heads=heads, ffn=ffn)
    return BERT(**cfg), _text_input(batch, seq_len, vocab)


def build_gpt2(
    batch: int, seq_len: int, vocab: int, hidden: int, layers: int, heads: int, ffn: int
):
    """GPT-2 and its token-id input."""
    cfg = dict(vocab=vocab, seq_len=seq_len, hidden=hidden, layers=layers, heads=heads, ffn=ffn)
    return GPT2(**cfg), _text_input(batch, seq_len, vocab)


def build_vit(
    batch: int, image: int, patch: int, hidden: int, layers: int, heads: int, ffn: int, classes: int
):
    """ViT and its image input ``(batch, 3, image, image)``."""
    model = ViT(image, patch, hidden, layers, heads, ffn, classes)
    return model, [InputSpec("image", (batch, 3, image, image), "float32")]


def build_mtdnn(
    batch: int,
    seq_len: int,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    ffn: int,
    lstm_hidden: int,
    lstm_layers: int,
    tags: list[int],
    recurrent: str = "loop",
):
    """MT-DNN and its token-id input."""
    bert = dict(vocab=vocab, seq_len=seq_len, hidden=hidden, layers=layers, heads=heads, ffn=ffn)
    model = MTDNN(bert, lstm_hidden, lstm_layers, tags, recurrent == "loop")
    return model, _text_input(batch, seq_len, vocab)
