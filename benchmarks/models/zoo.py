"""Models no one here wrote: torchvision, timm and transformers architectures with random weights
(no downloads), and a few PyTorch models of the kinds the papers use (recurrent classifiers,
recommenders). Each entry builds ``(module, example inputs)``; ``small=True`` shrinks the input
(the test suite's size), never the architecture. Weights that would hide a layer from the
output are drawn again (:func:`live_weights`), so that matching ONNX Runtime's output says
something of every layer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Entry:
    """One corpus model: where it comes from and how to build it."""

    source: str  # torchvision / timm / transformers / pytorch
    build: Callable[[bool], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    symbolic: bool = False  # exported with a symbolic batch dimension (loaded as batch 1)

    def make(self, small: bool) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """The module (its weights made live: :func:`live_weights`, and its convolutions drawn
        again where its output does not follow its input: :func:`he_init`, then its
        normalisations made the identity where it still does not: :func:`unit_norms`) and its
        example inputs."""
        module, args = self.live(small)
        if not follows_input(module, args):
            he_init(module)
            if not follows_input(module, args):
                unit_norms(module)
        return module, args

    def live(self, small: bool) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """The module at its library's draw with its weights made live (:func:`live_weights`),
        as rows measured before :meth:`make` checked that the output follows the input were,
        and its example inputs."""
        module, args = self.build(small)
        live_weights(module)
        return module, args


LIVE_BELOW = 1e-3
"""A parameter (not a bias) whose every value is smaller than this in magnitude is drawn again
by :func:`live_weights`."""


def live_weights(module: nn.Module, seed: int = 0) -> list[str]:
    """Draw again, in place, the parameters with which a randomly initialised model's output
    would not show a layer: all zero, or every value under :data:`LIVE_BELOW` in magnitude,
    biases left as they are. Libraries initialise so for training: the last batch norm of each
    residual branch at zero (timm's ResNets, RepViT, LeViT, MobileViT), layer scales of 1e-5 or
    1e-6 (ConvNeXt, PoolFormer, FastViT, EdgeNeXt), a classifier of zeros (torchvision's
    ViT-B/16: every output the same), attention-bias tables of zeros; each branch behind them
    added a millionth of its value or nothing, so a wrong kernel there still matched ONNX
    Runtime within the corpus' tolerance. A per-channel scale (one axis longer than 1) is
    drawn from U(0.5, 1), anything else from N(0, 0.02). Returns the names drawn again."""
    generator = torch.Generator().manual_seed(seed)
    drawn = []
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("bias") or not param.numel():
                continue
            if float(param.abs().max()) >= LIVE_BELOW:
                continue
            if sum(d > 1 for d in param.shape) <= 1:
                fresh = 0.5 + 0.5 * torch.rand(param.shape, generator=generator)
            else:
                fresh = 0.02 * torch.randn(param.shape, generator=generator)
            param.copy_(fresh.to(param.dtype))
            drawn.append(name)
    return drawn


FOLLOW_TOLERANCE = 1e-3
"""The least change, as a share of the output's largest value, another input must make to a
model's output for the output to follow the input (:func:`follows_input`): the corpus'
tolerance, so that a model whose output does not follow its input cannot match by chance."""


def follows_input(module: nn.Module, args: tuple) -> bool:
    """Whether ``module`` (in eval mode) gives another input (:func:`other_args`) an output
    differing by more than :data:`FOLLOW_TOLERANCE`. Deep networks that keep PyTorch's default
    draw or draw small weights (S3D; GoogLeNet, whose convolutions are drawn with a standard
    deviation of 0.01; ShuffleNet V2) shrink their activations layer by layer to nothing at
    random initialisation, and their output is the last layer's bias whatever the input: any
    build would match it."""
    module.eval()
    with torch.no_grad():
        first = _tensors(module(*args))
        second = _tensors(module(*other_args(args)))
    scale = max((float(t.abs().max()) for t in first), default=0.0) or 1.0
    change = max((float((a - b).abs().max()) for a, b in zip(first, second, strict=True)),
                 default=0.0)  # fmt: skip
    return change > FOLLOW_TOLERANCE * scale


def other_args(args: tuple) -> tuple:
    """``args`` with floating-point tensors drawn again (same shape, mean and spread) and
    integer ones (token ids) rolled by one along their last axis, so they stay valid ids."""
    generator = torch.Generator().manual_seed(1)
    other = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            spread = float(a.std()) if a.numel() > 1 else 1.0
            drawn = torch.randn(a.shape, generator=generator) * (spread or 1.0) + float(a.mean())
            other.append(drawn.to(a.dtype))
        elif isinstance(a, torch.Tensor) and a.dim():
            other.append(torch.roll(a, 1, dims=-1))
        else:
            other.append(a)
    return tuple(other)


def _tensors(out) -> list[torch.Tensor]:
    """The floating-point tensors of a module's output (a tensor, a tuple, a dict or a
    transformers ``ModelOutput``), in order."""
    if isinstance(out, torch.Tensor):
        return [out.float()] if out.is_floating_point() else []
    items = out.values() if isinstance(out, dict) else out if isinstance(out, list | tuple) else []
    return [t for item in items for t in _tensors(item)]


def he_init(module: nn.Module) -> None:
    """Draw every convolution's weights again as He et al. draw them for ReLU (normal, fan
    in), which keeps the variance from layer to layer. Drawn with fan out (torchvision's
    ResNets' draw), a depthwise convolution's weights come out too small by the root of its
    channels (PyTorch counts its fan out as channels x window), and ShuffleNet V2 still shrank
    to a millionth by its last stage."""
    for m in module.modules():
        if isinstance(m, nn.Conv1d | nn.Conv2d | nn.Conv3d):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")


def unit_norms(module: nn.Module) -> None:
    """Make every normalisation's scale 1 and shift 0 (PyTorch's default draw). timm's RepVGG
    draws its batch norms' scales from N(0.1, 0.1) and shifts from N(0, 0.1): each block
    scaled its input by about a tenth and added a shift, so the input's trace shrank to a
    hundred-millionth by the third stage even with :func:`he_init`'s convolutions, and the
    output was the shifts' alone, whatever the input."""
    norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, norms) and getattr(m, "weight", None) is not None:
                m.weight.fill_(1.0)
                if m.bias is not None:
                    m.bias.zero_()


def _image(size: int, small: bool) -> tuple[torch.Tensor]:
    side = 64 if small else size
    return (torch.randn(1, 3, side, side),)


def _torchvision(name: str, size: int = 224, fixed: bool = False, **kw) -> Entry:
    def build(small: bool):
        import torchvision

        model = getattr(torchvision.models, name)(weights=None, **kw)
        return model, _image(size, small and not fixed)

    return Entry("torchvision", build)


def _segmentation(name: str, size: int) -> Entry:
    """A torchvision segmentation model (its ``out`` map), no backbone weights."""

    def build(small: bool):
        import torchvision

        model = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)
        return _Field(model, "out"), _image(size, small)

    return Entry("torchvision", build)


def _symbolic(entry: Entry) -> Entry:
    """``entry`` exported with a symbolic batch dimension."""
    return Entry(entry.source, entry.build, symbolic=True)


def _timm(name: str, size: int | None = 224, **kw) -> Entry:
    """A timm model over a ``size`` x ``size`` image (``None``: the side its own configuration
    names, 256 for BoTNet and HaloNet, whose attention takes no other)."""

    def build(small: bool):
        import timm

        model = timm.create_model(name, pretrained=False, **kw)
        side = size or model.pretrained_cfg.get("input_size", (3, 224, 224))[-1]
        return model, _image(side, False)

    return Entry("timm", build)


class _Field(nn.Module):
    """A model returning one field of its output as a tensor (ONNX wants tensors): by name, or
    by position (``0``: a transformers output's ``last_hidden_state`` where it has one, else its
    first field); ``keywords`` name the arguments its inputs go to, in order (positional when
    none)."""

    def __init__(self, model: nn.Module, field: str | int, *keywords: str) -> None:
        super().__init__()
        self.model, self.field, self.keywords = model, field, keywords

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        if self.keywords:
            out = self.model(**dict(zip(self.keywords, xs, strict=True)))
        else:
            out = self.model(*xs)
        if self.field == 0 and getattr(out, "last_hidden_state", None) is not None:
            return out.last_hidden_state  # not Deformable DETR's queries' reference points
        return out[self.field]


_TRANSFORMERS = {
    "bert": ("BertConfig", "BertModel", "last_hidden_state"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", "last_hidden_state"),
    "roberta": ("RobertaConfig", "RobertaModel", "last_hidden_state"),
    "mobilebert": ("MobileBertConfig", "MobileBertModel", "last_hidden_state"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", "logits"),
    "llama": ("LlamaConfig", "LlamaForCausalLM", "logits"),
    "opt": ("OPTConfig", "OPTForCausalLM", "logits"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "logits"),
    "t5-encoder": ("T5Config", "T5EncoderModel", "last_hidden_state"),
    "albert": ("AlbertConfig", "AlbertModel", "last_hidden_state"),
    "electra": ("ElectraConfig", "ElectraModel", "last_hidden_state"),
    "deberta-v2": ("DebertaV2Config", "DebertaV2Model", "last_hidden_state"),
    "squeezebert": ("SqueezeBertConfig", "SqueezeBertModel", "last_hidden_state"),
    "mpnet": ("MPNetConfig", "MPNetModel", "last_hidden_state"),
    "bloom": ("BloomConfig", "BloomForCausalLM", "logits"),
    "gpt-neo": ("GPTNeoConfig", "GPTNeoForCausalLM", "logits"),
    "phi": ("PhiConfig", "PhiForCausalLM", "logits"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", "logits"),
    "mistral": ("MistralConfig", "MistralForCausalLM", "logits"),
}
"""Text models: (config class, model class, output field); their input is token ids."""


def _transformers(kind: str, seq: int = 128, **config) -> Entry:
    def build(small: bool):
        import transformers

        cfg_cls, model_cls, field = _TRANSFORMERS[kind]
        cfg = getattr(transformers, cfg_cls)(**config)
        cfg._attn_implementation = "eager"  # plain matmuls and softmax, as ONNX wants them
        model = getattr(transformers, model_cls)(cfg)
        length = 16 if small else seq
        ids = torch.randint(0, cfg.vocab_size, (1, length))
        return _Field(model, field, "input_ids"), (ids,)

    return Entry("transformers", build)


def _wav2vec2(seconds: float = 1.0, **config) -> Entry:
    """A wav2vec 2.0 encoder (1-D convolutional front end, then transformer layers) over raw
    16 kHz audio."""

    def build(small: bool):
        import transformers

        cfg = transformers.Wav2Vec2Config(**config)
        cfg._attn_implementation = "eager"
        audio = torch.randn(1, 3200 if small else int(16000 * seconds))
        return _Field(transformers.Wav2Vec2Model(cfg), "last_hidden_state", "input_values"), (
            audio,
        )

    return Entry("transformers", build)


def _whisper_encoder(frames: int = 3000, **config) -> Entry:
    """Whisper's audio encoder (two 1-D convolutions, then transformer layers) over log-mel
    frames (3,000: 30 s)."""

    def build(small: bool):
        import transformers
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        length = 200 if small else frames
        cfg = transformers.WhisperConfig(max_source_positions=length // 2, **config)
        cfg._attn_implementation = "eager"
        mel = torch.randn(1, cfg.num_mel_bins, length)
        return _Field(WhisperEncoder(cfg), "last_hidden_state", "input_features"), (mel,)

    return Entry("transformers", build)


def _segformer(size: int = 512) -> Entry:
    """SegFormer (MiT-b0 encoder, overlapping patch convolutions, all-MLP decoder)."""

    def build(small: bool):
        import transformers

        cfg = transformers.SegformerConfig(num_labels=19)
        model = transformers.SegformerForSemanticSegmentation(cfg)
        return _Field(model, "logits", "pixel_values"), _image(size, small)

    return Entry("transformers", build)


class RecurrentClassifier(nn.Module):
    """Embedding, a recurrent layer stack, the last step to a classifier (sentiment-style)."""

    def __init__(self, cell: str, bidirectional: bool = False, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(5000, 128)
        self.rnn = getattr(nn, cell)(128, 256, num_layers=layers, batch_first=True,
                                     bidirectional=bidirectional)  # fmt: skip
        self.head = nn.Linear(256 * (2 if bidirectional else 1), 5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.rnn(self.embed(ids))[0]
        return self.head(out[:, -1])


def _recurrent(cell: str, bidirectional: bool = False) -> Entry:
    def build(small: bool):
        return RecurrentClassifier(cell, bidirectional), (
            torch.randint(0, 5000, (1, 8 if small else 64)),
        )

    return Entry("pytorch", build)


class TwoTower(nn.Module):
    """User and item towers of dense layers, scored by a dot product (retrieval)."""

    def __init__(self) -> None:
        super().__init__()
        self.users, self.items = nn.Embedding(10000, 64), nn.Embedding(20000, 64)

        def tower() -> nn.Module:
            return nn.Sequential(nn.Linear(64 + 32, 256), nn.ReLU(), nn.Linear(256, 128))

        self.user_tower, self.item_tower = tower(), tower()

    def forward(self, user, item, user_feats, item_feats):
        u = self.user_tower(torch.cat([self.users(user), user_feats], 1))
        i = self.item_tower(torch.cat([self.items(item), item_feats], 1))
        return (u * i).sum(1)


class WideAndDeep(nn.Module):
    """A linear wide part beside a deep MLP over embedded categorical features."""

    def __init__(self, fields: int = 8, vocab: int = 1000) -> None:
        super().__init__()
        self.embed = nn.Embedding(fields * vocab, 32)
        self.wide = nn.Linear(fields * 32 + 13, 1)
        self.deep = nn.Sequential(nn.Linear(fields * 32 + 13, 512), nn.ReLU(), nn.Linear(512, 256),
                                  nn.ReLU(), nn.Linear(256, 1))  # fmt: skip

    def forward(self, cats: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.embed(cats).flatten(1), dense], 1)
        return torch.sigmoid(self.wide(x) + self.deep(x))


class FourTowers(nn.Module):
    """Four towers at batch 1 (two MLPs of 1024-wide layers, two small CNNs), concatenated."""

    def __init__(self) -> None:
        super().__init__()

        def mlp() -> nn.Module:
            return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU())

        def cnn() -> nn.Module:
            return nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1),
                                 nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())  # fmt: skip

        self.mlps, self.cnns = nn.ModuleList([mlp(), mlp()]), nn.ModuleList([cnn(), cnn()])
        self.head = nn.Linear(2 * 1024 + 2 * 64, 10)

    def forward(self, a, b, img1, img2):
        parts = [self.mlps[0](a), self.mlps[1](b), self.cnns[0](img1), self.cnns[1](img2)]
        return self.head(torch.cat(parts, 1))


class ErfEncoder(nn.Module):
    """Four encoder layers of ``nn.Linear``, ``nn.LayerNorm`` and exact (erf) ``nn.GELU``."""

    def __init__(self, d: int = 256, layers: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def _module(cls: type[nn.Module], make_inputs: Callable[[bool], tuple]) -> Entry:
    return Entry("pytorch", lambda small: (cls(), make_inputs(small)))


CORPUS: dict[str, Entry] = {
    "resnet18": _torchvision("resnet18"),
    "resnet50": _torchvision("resnet50"),
    "mobilenet_v2": _torchvision("mobilenet_v2"),
    "mobilenet_v3_small": _torchvision("mobilenet_v3_small"),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "regnet_y_400mf": _torchvision("regnet_y_400mf"),
    "convnext_tiny": _torchvision("convnext_tiny"),
    "densenet121": _torchvision("densenet121"),
    "googlenet": _torchvision("googlenet", init_weights=True, aux_logits=False),
    "squeezenet1_1": _torchvision("squeezenet1_1"),
    "shufflenet_v2": _torchvision("shufflenet_v2_x1_0"),
    "vit_b_16": _torchvision("vit_b_16", fixed=True),
    "swin_t": _torchvision("swin_t", fixed=True),
    "deit_tiny": _timm("deit_tiny_patch16_224"),
    "mobilevit_xs": _timm("mobilevit_xs", size=256),
    "bert": _transformers("bert", num_hidden_layers=4),
    "distilbert": _transformers("distilbert", n_layers=4),
    "roberta": _transformers("roberta", num_hidden_layers=4),
    "gpt2": _transformers("gpt2", n_layer=4),
    "t5_encoder": _transformers("t5-encoder", num_layers=4),
    "lstm_classifier": _recurrent("LSTM"),
    "gru_classifier": _recurrent("GRU"),
    "bilstm_classifier": _recurrent("LSTM", bidirectional=True),
    "two_tower": _module(TwoTower, lambda small: (
        torch.randint(0, 10000, (1,)), torch.randint(0, 20000, (1,)), torch.randn(1, 32),
        torch.randn(1, 32))),
    "wide_and_deep": _module(WideAndDeep, lambda small: (
        torch.randint(0, 8000, (1, 8)), torch.randn(1, 13))),
    "four_towers": _module(FourTowers, lambda small: (
        torch.randn(1, 512), torch.randn(1, 512), torch.randn(1, 3, 32, 32),
        torch.randn(1, 3, 32, 32))),
    "erf_encoder": _module(ErfEncoder, lambda small: (torch.randn(1, 16 if small else 128, 256),)),
    # Grouped convolutions, plain 3x3 stacks, multi-branch and mobile networks
    "resnext50_32x4d": _torchvision("resnext50_32x4d"),
    "regnet_x_400mf": _torchvision("regnet_x_400mf"),
    "vgg11": _torchvision("vgg11"),
    "inception_v3": _torchvision("inception_v3", size=299, fixed=True, init_weights=True, aux_logits=False),
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large"),
    "mnasnet1_0": _torchvision("mnasnet1_0"),
    "repvgg_a0": _timm("repvgg_a0"),
    "resnet26d": _timm("resnet26d"),
    "ghostnet_100": _timm("ghostnet_100"),
    "mobileone_s0": _timm("mobileone_s0"),
    "hgnetv2_b0": _timm("hgnetv2_b0"),
    "mobilenetv4_conv_small": _timm("mobilenetv4_conv_small"),
    # Metaformers and hybrid vision transformers
    "poolformer_s12": _timm("poolformer_s12"),
    "convformer_s18": _timm("convformer_s18"),
    "efficientformer_l1": _timm("efficientformer_l1"),
    "levit_128s": _timm("levit_128s"),
    "edgenext_x_small": _timm("edgenext_x_small", size=256),
    "mobilevitv2_050": _timm("mobilevitv2_050", size=256),
    # Segmentation
    "lraspp_mobilenet_v3": _segmentation("lraspp_mobilenet_v3_large", size=512),
    "segformer_b0": _segformer(),
    # Decoders, a bottlenecked encoder, audio encoders
    "llama": _transformers("llama", hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                           num_attention_heads=8, num_key_value_heads=2, vocab_size=8000),
    "opt": _transformers("opt", hidden_size=256, ffn_dim=1024, num_hidden_layers=4,
                         num_attention_heads=4, word_embed_proj_dim=256, vocab_size=8000),
    "qwen2": _transformers("qwen2", hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                           num_attention_heads=8, num_key_value_heads=2, vocab_size=8000),
    "mobilebert": _transformers("mobilebert", num_hidden_layers=6),
    "albert": _transformers("albert", num_hidden_layers=4),  # its default: hidden 4,096
    "wav2vec2": _wav2vec2(num_hidden_layers=4),
    "whisper_encoder": _whisper_encoder(),
    # Symbolic batch dimensions (loaded as batch 1)
    "resnet18_symbolic": _symbolic(_torchvision("resnet18")),
    "bert_symbolic": _symbolic(_transformers("bert", num_hidden_layers=4)),
}  # fmt: skip
"""Every corpus model by name (the 23 of :data:`ADDED` are added below)."""

_DECODER = dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                num_attention_heads=8, vocab_size=8000)  # fmt: skip
ADDED = {
    # Vision: mixed depthwise kernels, hard-swish / SE mobiles, reparameterized and attention
    # hybrids, multi-scale branches, aggregation trees
    "mixnet_s": _timm("mixnet_s"),
    "lcnet_050": _timm("lcnet_050"),
    "rexnet_100": _timm("rexnet_100"),
    "tinynet_a": _timm("tinynet_a", size=192),
    "fastvit_t8": _timm("fastvit_t8"),
    "repvit_m0_9": _timm("repvit_m0_9"),
    "efficientvit_b0": _timm("efficientvit_b0"),
    "tiny_vit_5m": _timm("tiny_vit_5m_224"),
    "xcit_nano": _timm("xcit_nano_12_p16_224"),
    "pit_ti": _timm("pit_ti_224"),
    "dla34": _timm("dla34"),
    "res2net50_14w_8s": _timm("res2net50_14w_8s"),
    "selecsls42b": _timm("selecsls42b"),
    "inception_next_tiny": _timm("inception_next_tiny"),
    # Text encoders (relative positions, grouped 1-D convolutions) and decoders (ALiBi, local
    # attention, partial rotary embeddings, GQA)
    "electra": _transformers("electra", num_hidden_layers=4),
    "deberta_v2": _transformers("deberta-v2", hidden_size=256, intermediate_size=1024,
                                num_hidden_layers=4, num_attention_heads=4, vocab_size=8000),
    "squeezebert": _transformers("squeezebert", num_hidden_layers=4),
    "mpnet": _transformers("mpnet", num_hidden_layers=4),
    "bloom": _transformers("bloom", hidden_size=256, n_layer=4, n_head=8, vocab_size=8000),
    "gpt_neo": _transformers("gpt-neo", hidden_size=256, num_layers=4, num_heads=8,
                             attention_types=[[["global", "local"], 2]], vocab_size=8000),
    "phi": _transformers("phi", **_DECODER),
    "gemma": _transformers("gemma", num_key_value_heads=2, head_dim=32, **_DECODER),
    "mistral": _transformers("mistral", num_key_value_heads=2, **_DECODER),
}  # fmt: skip
"""23 architectures added on 2026-12-04, each run first by a session that had not tuned for
it (``benchmarks/README.md``: the corpus, models added)."""
CORPUS.update(ADDED)


def export(name: str, path, small: bool = False) -> tuple[str, ...]:
    """Write ``CORPUS[name]`` as ONNX to ``path`` (seeded weights); returns the input names.
    The dynamo exporter first, the TorchScript one where it fails (and for a symbolic batch)."""
    return _export(name, path, small)[0]


def _export(name: str, path, small: bool) -> tuple[tuple[str, ...], tuple]:
    """:func:`export`, and the example inputs the model was built with. The exporter's own
    optimizer logs each constant it cannot fold (BERT's attention mask: "Evaluation failed:
    cannot reshape ...") as a warning: its logger is held to errors while it exports."""
    import logging

    module, args = seeded(name, small)
    module.eval()
    names = input_names(args)
    folding = logging.getLogger("onnxscript")
    level = folding.level
    folding.setLevel(logging.ERROR)
    try:
        _exported(name, module, args, names, path)
    finally:
        folding.setLevel(level)
    return names, args


def _exported(name: str, module: nn.Module, args: tuple, names: tuple, path) -> None:
    """Export ``module`` to ``path``: with a symbolic batch where the corpus says so, else by
    the dynamo exporter, by TorchScript where that fails or writes a file ONNX's checker
    refuses (timm's Gemma 4 ViT: a clamp's bound that no node made)."""
    import warnings

    import onnx

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if CORPUS[name].symbolic:
            _torchscript_export(module, args, path, names, symbolic=True)
            return
        try:
            torch.onnx.export(module, args, str(path), input_names=list(names), dynamo=True,
                              external_data=False, verbose=False)  # fmt: skip
            onnx.checker.check_model(str(path))
        except Exception:
            _torchscript_export(module, args, path, names)


def seeded(name: str, small: bool) -> tuple[nn.Module, tuple]:
    """``CORPUS[name]``'s module and example inputs, made after seeding torch: the same weights
    and inputs every time (the export, the float64 reference)."""
    torch.manual_seed(0)
    return CORPUS[name].make(small)


def float64_outputs(name: str, small: bool = False) -> list[np.ndarray] | None:
    """``CORPUS[name]`` built as :func:`export` builds it (the same seed, so the same weights
    and inputs) and run by torch in float64, its floating inputs widened: its output tensors in
    order, a reference more exact than any float32 runtime (``None`` where the module does not
    run in float64)."""
    try:
        module, args = seeded(name, small)
        wide = [a.double() if a.is_floating_point() else a for a in args]
        with torch.no_grad():
            out = module.eval().double()(*wide)
    except Exception:  # a module that does not run in float64 has no reference
        return None
    tensors = [out] if isinstance(out, torch.Tensor) else out
    if not isinstance(tensors, (list, tuple)) or not tensors:
        return None
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    return [t.numpy() for t in tensors]


def input_names(args: tuple) -> tuple[str, ...]:
    """The ONNX input names a corpus export gives its example inputs ``args``: ``in0``,
    ``in1``..."""
    return tuple(f"in{k}" for k in range(len(args)))


def outside(name: str) -> str:
    """``name``; one of the forms of :data:`OUTSIDE_FORMS` is added to :data:`CORPUS` under
    that name first, so that a benchmark taking corpus models can measure a model no one here
    has tuned for: ``timm:NAME`` (a timm model, built as the corpus builds its timm models:
    random weights made live, an image of the size its configuration names), ``tv:NAME`` (a
    torchvision model, :func:`_tv`), ``hf:CLASS[:FIELD=VALUE,...]`` (a transformers model
    class, :func:`_hf`), ``sym:MODEL`` (any of these or a corpus model exported with a
    symbolic batch, loaded as batch 1). Anything else is left as it is (the caller finds it
    missing from the corpus)."""
    if name in CORPUS:
        return name
    entry = None
    if name.startswith("timm:"):
        entry = _timm(name.removeprefix("timm:"), size=None)
    elif name.startswith("tv:"):
        entry = _tv(name.removeprefix("tv:"))
    elif name.startswith("hf:"):
        entry = _hf(name.removeprefix("hf:"))
    elif name.startswith("sym:"):
        inner = outside(name.removeprefix("sym:"))
        entry = _symbolic(CORPUS[inner]) if inner in CORPUS else None
    if entry is not None:
        CORPUS[name] = entry
    return name


OUTSIDE_FORMS = "timm:NAME, tv:[video.|segmentation.]NAME, hf:CLASS[:FIELD=VALUE,...] or sym:MODEL"
"""How a benchmark's ``MODEL`` names a model outside the corpus (:func:`outside`)."""

TV_INPUTS = {"": (3, 224, 224), "video.": (3, 16, 112, 112), "segmentation.": (3, 224, 224)}
"""A torchvision model's input by its family (``torchvision.models`` itself, ``.video``,
``.segmentation``), batch 1: an image, or 16 frames of 112 x 112."""
TV_MODEL_INPUTS = {"video.s3d": (3, 16, 224, 224)}
"""Models whose input is not their family's: S3D pools its last 2 x 7 x 7 map whole with a
fixed window (frames of 224 x 224)."""


def _tv(spec: str) -> Entry | None:
    """``[video.|segmentation.]NAME``: ``torchvision.models[.FAMILY].NAME`` with random
    weights (no backbone weights either) over :data:`TV_INPUTS`'s input for its family (a
    segmentation model's ``out`` map); None where the family has no such builder."""
    import torchvision

    family, _, name = spec.rpartition(".")
    family = f"{family}." if family else ""
    if family not in TV_INPUTS:
        return None
    module = getattr(torchvision.models, family[:-1]) if family else torchvision.models
    if name not in torchvision.models.list_models(module):
        return None  # no such builder (a helper or a class is none either)
    builder = getattr(module, name)

    def build(small: bool):
        extra = {"weights_backbone": None} if family == "segmentation." else {}
        model = builder(weights=None, **extra)
        if family == "segmentation.":
            model = _Field(model, "out")
        shape = TV_MODEL_INPUTS.get(f"{family}{name}", TV_INPUTS[family])
        return model, (torch.randn(1, *shape),)

    return Entry("torchvision", build)


HF_INPUTS = {
    "input_ids": 128, "input_values": 16000, "input_features": 3000, "pixel_values": 224,
    "past_values": 512,
}  # fmt: skip
"""The input a transformers model takes first (its ``main_input_name``) and its length: 128
tokens, one second of 16 kHz audio, 3,000 log-mel frames (30 s), a 224 x 224 image (or the
size the config or its backbone's names, :func:`_image_size`). A config that names mel bins
for ``input_values`` (AST) takes its own spectrogram, one that names frames for
``pixel_values`` (VideoMAE, TimeSformer) a clip of that many images; W2V-BERT's
``input_features`` are the 1,500 pairs of those frames, stacked; other ``input_features`` are
mel bins first (Whisper's), or frames first where the model refuses that (Parakeet's
encoder). A time-series model's
``past_values`` (PatchTST, PatchTSMixer) is its config's ``num_input_channels`` series of 512
steps (the config's ``context_length`` set to it: its default, 32, is a few patches)."""


def hf_spec(spec: str) -> tuple[str, dict] | None:
    """``CLASS[:FIELD=VALUE,...]`` as ``(CLASS, {FIELD: VALUE})``, each value a Python literal
    (``depths=[2,2,2,2]``); None where a value is not a literal or has no field's name. No
    class is looked up here."""
    import ast

    cls_name, _, fields = spec.partition(":")
    try:
        call = ast.parse(f"config({fields})", mode="eval").body
        config = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (ValueError, SyntaxError):
        return None
    if call.args or None in config or not cls_name.isidentifier():
        return None  # a value without its field's name
    return cls_name, config


def _hf(spec: str) -> Entry | None:
    """``CLASS[:KEY=VALUE,...]`` (:func:`hf_spec`): ``transformers.CLASS`` built from its own
    config class's defaults with the given fields changed, eager attention, its first output
    field as the output, over :data:`HF_INPUTS`'s input for its ``main_input_name`` (an
    encoder-decoder's decoder, where it takes ``decoder_input_ids``, also given
    :data:`DECODER_TOKENS` tokens: T5, Whisper, Marian; DETR's takes learned queries); None
    where the spec does not parse or ``CLASS`` is not a transformers model class with one of
    those inputs."""
    parsed = hf_spec(spec)
    if parsed is None:
        return None
    import transformers

    cls_name, config = parsed
    cls = getattr(transformers, cls_name, None)
    if not isinstance(cls, type) or getattr(cls, "main_input_name", None) not in HF_INPUTS:
        return None

    def build(small: bool):
        kind = cls.main_input_name
        length = HF_INPUTS[kind] // (8 if small and kind != "pixel_values" else 1)
        series = {"context_length": length} if kind == "past_values" else {}
        cfg = cls.config_class(**{**series, **config})
        cfg._attn_implementation = "eager"
        model = cls(cfg)
        if kind == "input_ids":
            x = torch.randint(0, getattr(cfg, "vocab_size", 256), (1, length))  # CANINE: chars
        elif kind == "input_values" and hasattr(cfg, "num_mel_bins"):  # AST: a spectrogram
            x = torch.randn(1, cfg.max_length, cfg.num_mel_bins)
        elif kind == "input_values":  # a codec's (EnCodec) input has its audio channels
            channels = getattr(cfg, "audio_channels", None)
            x = torch.randn(1, *([channels] if channels else []), length)
        elif kind == "input_features" and hasattr(cfg, "input_feat_per_channel"):
            x = torch.randn(1, length, cfg.input_feat_per_channel * cfg.input_channels)  # S2T
        elif kind == "input_features" and hasattr(cfg, "feature_projection_input_dim"):
            x = torch.randn(1, length // 2, cfg.feature_projection_input_dim)  # W2V-BERT: pairs
        elif kind == "input_features":  # mel bins first (Whisper's), else frames first
            x = _accepted(model, torch.randn(1, cfg.num_mel_bins, length))
        elif kind == "past_values":  # steps by channels
            x = torch.randn(1, cfg.context_length, cfg.num_input_channels)
        else:  # the config's image size, where it names one (a model may check it)
            frames = getattr(cfg, "num_frames", None)  # VideoMAE, TimeSformer: a clip
            x = torch.randn(1, *([frames] if frames else []), 3, *_image_size(cfg, length))
        decoder = "decoder_input_ids" in inspect.signature(model.forward).parameters
        if not (decoder and getattr(cfg, "is_encoder_decoder", False)):
            return _Field(model, 0, kind), (x,)  # DETR's decoder takes learned queries
        tokens = torch.randint(0, getattr(cfg, "vocab_size", 256), (1, DECODER_TOKENS))
        return _Field(model, 0, kind, "decoder_input_ids"), (x, tokens)

    return Entry("transformers", build)


def _accepted(model, x):
    """``x`` (``(1, bins, frames)``) where ``model`` runs on it, else its frames first
    (Parakeet's encoder takes ``(1, frames, bins)``)."""
    try:
        with torch.no_grad():
            model(x)
    except RuntimeError:
        return x.transpose(1, 2).contiguous()
    return x


def _image_size(cfg, side: int) -> tuple[int, int]:
    """Height and width of the image a transformers config names (``image_size``: one side or
    both; its backbone's where it names none: ViTPose's 256 x 192, Depth Anything's 518), else
    ``side`` square."""
    named = getattr(cfg, "image_size", None)
    if named is None and getattr(cfg, "backbone_config", None) is not None:
        named = getattr(cfg.backbone_config, "image_size", None)
    if isinstance(named, int):
        return named, named
    if isinstance(named, (list, tuple)) and len(named) == 2:
        return int(named[0]), int(named[1])
    return side, side


DECODER_TOKENS = 16
"""Tokens an encoder-decoder transformers model's decoder is given (:func:`_hf`): a reply of
16 tokens so far, attending to the whole encoded input."""


def exported_feeds(name: str, path, small: bool = False) -> tuple[dict | None, dict]:
    """``CORPUS[name]`` exported to ``path`` (:func:`export`); returns the shapes to give
    ``load_model`` (a symbolic batch as the example's, else None) and the example inputs by
    input name (the loaded model may keep fewer of them)."""
    names, args = _export(name, path, small)  # the inputs it was built with: built once
    feeds = {n: a.numpy() for n, a in zip(names, args, strict=True)}
    shapes = {n: list(a.shape) for n, a in feeds.items()} if CORPUS[name].symbolic else None
    return shapes, feeds


def _torchscript_export(module, args, path, names, symbolic: bool = False) -> None:
    axes = {n: {0: "batch"} for n in names} if symbolic else None
    torch.onnx.export(module.eval(), args, str(path), input_names=list(names), dynamo=False,
                      dynamic_axes=axes, opset_version=17)  # fmt: skip


def export_symbolic_batch(module: nn.Module, args: tuple, path) -> None:
    """``module`` (one image input) exported with a symbolic batch dimension (the TorchScript
    exporter's ``dynamic_axes``), its input named ``in0``."""
    _torchscript_export(module, args, path, ("in0",), symbolic=True)


def random_feeds(model, args: tuple, count: int) -> list[dict]:
    """``count`` inputs for ``model`` (a loaded export): the export's example inputs ``args``,
    float ones redrawn each time (token ids stay valid)."""
    import numpy as np

    example = dict(zip((s.name for s in model.inputs), (a.numpy() for a in args), strict=False))
    rng = np.random.default_rng(0)
    return [
        {k: rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v
         for k, v in example.items()}
        for _ in range(count)
    ]  # fmt: skip


def onnx_path(folder, name: str, suffix: str = ""):
    """``folder/NAME{suffix}.onnx``; a name too long for a file's (a transformers class with
    many fields: DeepSeek-V3's spec is 301 characters, the limit 255) is cut and ends in a
    digest of the whole."""
    import hashlib
    from pathlib import Path

    stem = f"{name}{suffix}"
    if len(stem) > 200:
        stem = f"{stem[:150]}-{hashlib.sha1(stem.encode()).hexdigest()[:12]}"
    return Path(folder) / f"{stem}.onnx"


def load_exported(name: str, work, row: dict):
    """``name`` of the corpus (``NAME-symbolic``: with a symbolic batch dimension) exported at
    its small size to ONNX in ``work`` and loaded (the symbolic batch given as 1); returns
    ``(model, example inputs)``. ``row["stage"]`` is ``"import"`` once the export is written."""
    from pathlib import Path

    from tvm_hetero.frontends import load_model

    base, symbolic = name.removesuffix("-symbolic"), name.endswith("-symbolic")
    path = Path(work) / f"{name}.onnx"
    torch.manual_seed(0)  # the weights ``export`` draws, and the example inputs
    module, args = CORPUS[base].make(True)
    if symbolic:
        export_symbolic_batch(module, args, path)
    else:
        export(name, path, small=True)
    row["stage"] = "import"
    model = load_model(path, shapes={"in0": list(args[0].shape)} if symbolic else None)
    return model, args
