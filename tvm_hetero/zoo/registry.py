"""The model zoo: every model at the paper's size (default preset) and a tiny preset for tests.

A model is named ``NAME[:PRESET]`` (``bert-base``, ``resnet50:tiny``); keyword overrides change
single settings (``batch=16``, ``seq_len=64``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tvm_hetero.frontends.model import Model
from tvm_hetero.ir.recurrent import RECURRENT_FORMS
from tvm_hetero.zoo import cnn, mixed, rnn, transformers

PAPER = "paper"
TINY = "tiny"


@dataclass(frozen=True)
class ZooEntry:
    """One zoo model: its builder, its presets and the paper it comes from."""

    name: str
    builder: Callable[..., Any]
    presets: dict[str, dict[str, Any]]
    cites: str
    description: str = ""


def _bert(layers: int, hidden: int, heads: int, seq_len: int = 128, batch: int = 1) -> dict:
    return dict(
        batch=batch, seq_len=seq_len, vocab=30522, hidden=hidden, layers=layers, heads=heads,
        ffn=4 * hidden,
    )  # fmt: skip


_TINY_BERT = dict(batch=1, seq_len=8, vocab=64, hidden=32, layers=2, heads=2, ffn=64)
_RESNET18 = dict(block="basic", stages=[2, 2, 2, 2], width=64, classes=1000)
_TINY_RESNET = dict(block="basic", stages=[1, 1], width=8, classes=10)


def _vit(hidden: int, layers: int, heads: int, patch: int = 16) -> dict:
    return dict(
        batch=1, image=224, patch=patch, hidden=hidden, layers=layers, heads=heads,
        ffn=4 * hidden, classes=1000,
    )  # fmt: skip


def _rnn_entry(cell: str) -> ZooEntry:
    """LSTM / GRU at EOP's Table 3 size (input 80, hidden 64, 2 layers, batch 16) and tiny."""
    return ZooEntry(
        cell,
        lambda **k: rnn.build_rnn(cell, **k),
        {
            PAPER: dict(batch=16, seq_len=1, input_size=80, hidden=64, num_layers=2),
            TINY: dict(batch=2, seq_len=3, input_size=8, hidden=8, num_layers=2),
        },
        "EOP Table 3",
        f"stacked {cell.upper()}, a loop kernel a layer",
    )


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in [
        ZooEntry(
            "mlp",
            mixed.build_mlp,
            {
                PAPER: dict(batch=16, sizes=[784, 512, 512, 10]),
                TINY: dict(batch=4, sizes=[16, 32, 8]),
            },
            "-",
            "ReLU multi-layer perceptron",
        ),
        _rnn_entry("lstm"),
        _rnn_entry("gru"),
        ZooEntry(
            "bert-base",
            transformers.build_bert,
            {PAPER: _bert(12, 768, 12), TINY: _TINY_BERT},
            "EOP Table 3, Lee et al.",
            "BERT-base encoder (12 x 768, 12 heads)",
        ),
        ZooEntry(
            "bert-small",
            transformers.build_bert,
            {PAPER: _bert(4, 256, 4), TINY: _TINY_BERT},
            "-",
            "small BERT encoder (4 x 256, 4 heads)",
        ),
        ZooEntry(
            "gpt2",
            transformers.build_gpt2,
            {
                PAPER: dict(
                    batch=1, seq_len=64, vocab=50257, hidden=768, layers=12, heads=12, ffn=3072
                ),
                TINY: dict(_TINY_BERT, ffn=128),
            },
            "Lee et al.",
            "GPT-2 small with LM head (causal)",
        ),
        ZooEntry(
            "resnet18",
            cnn.build_resnet,
            {
                PAPER: dict(batch=1, image=224, **_RESNET18),
                TINY: dict(batch=1, image=32, **_TINY_RESNET),
            },
            "EOP, FlexPie, DUET",
            "ResNet-18 (BatchNorm folded)",
        ),
        ZooEntry(
            "resnet50",
            cnn.build_resnet,
            {
                PAPER: dict(
                    batch=1,
                    image=224,
                    block="bottleneck",
                    stages=[3, 4, 6, 3],
                    width=64,
                    classes=1000,
                ),
                TINY: dict(
                    batch=1, image=32, block="bottleneck", stages=[1, 1], width=4, classes=10
                ),
            },
            "EOP, FlexPie",
            "ResNet-50 (BatchNorm folded)",
        ),
        ZooEntry(
            "mobilenet",
            cnn.build_mobilenet,
            {
                PAPER: dict(batch=1, image=224, width=1.0, blocks=13, classes=1000),
                TINY: dict(batch=1, image=32, width=0.25, blocks=4, classes=10),
            },
            "EOP, FlexPie",
            "MobileNet v1",
        ),
        ZooEntry(
            "vit-base",
            transformers.build_vit,
            {
                PAPER: _vit(768, 12, 12),
                TINY: dict(
                    batch=1, image=32, patch=8, hidden=32, layers=2, heads=2, ffn=64, classes=10
                ),
            },
            "EdgePipe",
            "ViT-Base/16",
        ),
        ZooEntry(
            "vit-large",
            transformers.build_vit,
            {
                PAPER: _vit(1024, 24, 16),
                TINY: dict(
                    batch=1, image=32, patch=8, hidden=48, layers=3, heads=3, ffn=96, classes=10
                ),
            },
            "EdgePipe",
            "ViT-Large/16",
        ),
        ZooEntry(
            "vit-huge",
            transformers.build_vit,
            {
                PAPER: _vit(1280, 32, 16, patch=14),
                TINY: dict(
                    batch=1, image=28, patch=7, hidden=64, layers=4, heads=4, ffn=128, classes=10
                ),
            },
            "EdgePipe",
            "ViT-Huge/14",
        ),
        ZooEntry(
            "wide-deep",
            mixed.build_wide_deep,
            {
                PAPER: dict(
                    batch=1,
                    wide=363,
                    dense=13,
                    embedding=192,
                    ffn=[128, 64],
                    cnn=_RESNET18,
                    image=224,
                    rnn_input=80,
                    rnn_seq=1,
                    rnn_hidden=64,
                    rnn_layers=2,
                ),
                TINY: dict(
                    batch=1,
                    wide=12,
                    dense=6,
                    embedding=8,
                    ffn=[8, 4],
                    cnn=_TINY_RESNET,
                    image=32,
                    rnn_input=8,
                    rnn_seq=2,
                    rnn_hidden=8,
                    rnn_layers=2,
                ),
            },
            "DUET Table I",
            "Wide-and-Deep: wide, FFN, ResNet-18 and LSTM branches",
        ),
        ZooEntry(
            "siamese-lstm",
            rnn.build_siamese,
            {
                PAPER: dict(batch=1, seq_len=64, input_size=64, hidden=128, num_layers=2),
                TINY: dict(batch=1, seq_len=3, input_size=8, hidden=8, num_layers=2),
            },
            "DUET Table I",
            "Siamese network of two stacked LSTMs",
        ),
        ZooEntry(
            "mt-dnn",
            transformers.build_mtdnn,
            {
                PAPER: dict(
                    _bert(12, 768, 12, seq_len=32),
                    lstm_hidden=256,
                    lstm_layers=2,
                    tags=[29, 3, 3, 7, 9, 11, 9, 25, 7, 13],
                ),
                TINY: dict(_TINY_BERT, seq_len=4, lstm_hidden=8, lstm_layers=2, tags=[3, 5]),
            },
            "DUET Table I",
            "MT-DNN: shared BERT-base, 10 LSTM tagger heads",
        ),
    ]
}


class UnknownModelError(ValueError):
    """A model name or preset the zoo does not have."""


RECURRENT = ("lstm", "gru", "wide-deep", "siamese-lstm", "mt-dnn")
"""Zoo models with recurrent layers: their presets carry ``recurrent`` (``loop``, a loop
kernel a layer, or ``unrolled``; the weights are the same either way)."""
for _name in RECURRENT:
    for _settings in ZOO[_name].presets.values():
        _settings["recurrent"] = "loop"


def parse_name(spec: str) -> tuple[str, str]:
    """Split ``NAME[:PRESET]`` and check both exist."""
    name, _, preset = spec.partition(":")
    preset = preset or PAPER
    if name not in ZOO:
        raise UnknownModelError(
            f"unknown model {name!r}; the zoo has {', '.join(sorted(ZOO))} "
            "(or give a path to an .onnx, .pt2 or TVMScript .py file)"
        )
    if preset not in ZOO[name].presets:
        raise UnknownModelError(
            f"model {name!r} has no preset {preset!r}; choose from {sorted(ZOO[name].presets)}"
        )
    return name, preset


def build_config(spec: str, **overrides: Any) -> dict[str, Any]:
    """The builder settings of ``NAME[:PRESET]`` with ``overrides`` applied."""
    name, preset = parse_name(spec)
    cfg = dict(ZOO[name].presets[preset])
    unknown = sorted(set(overrides) - set(cfg))
    if unknown:
        raise UnknownModelError(
            f"model {name!r} has no setting {', '.join(unknown)}; settings: {sorted(cfg)}"
        )
    for key, value in overrides.items():
        _check_setting(name, key, cfg[key], value)
    cfg.update(overrides)
    return cfg


def _check_setting(model: str, key: str, default: Any, value: Any) -> None:
    """Every number in a zoo setting is a size, a count or a width: positive, and an integer
    where the preset's is (``batch=-4`` or ``layers=2.5`` is refused here, not deep in TVM);
    names stay names, lists stay lists."""
    if key == "recurrent" and value not in RECURRENT_FORMS:
        raise UnknownModelError(
            f"model {model!r}: setting recurrent={value!r} is not one of "
            f"{', '.join(RECURRENT_FORMS)}"
        )
    if not _fits(default, value):
        raise UnknownModelError(
            f"model {model!r}: setting {key}={value!r} does not fit; give positive sizes "
            f"shaped like {default!r}"
        )


def _fits(default: Any, value: Any) -> bool:
    if isinstance(default, dict):
        return isinstance(value, dict) and all(
            k in default and _fits(default[k], v) for k, v in value.items()
        )
    if isinstance(default, list | tuple):
        return isinstance(value, list | tuple) and all(
            _fits(default[0] if default else 1, v) for v in value
        )
    if isinstance(default, str | bool):
        return type(value) is type(default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return False
    return isinstance(value, int) or not isinstance(default, int)


def load_zoo_model(spec: str, **overrides: Any) -> Model:
    """Build a zoo model with deterministic random weights.

    Parameters
    ----------
    spec : str
        ``NAME[:PRESET]``, e.g. ``bert-base`` (paper size) or ``bert-base:tiny``.
    **overrides
        Settings to change, e.g. ``batch=16``.
    """
    from tvm_hetero.zoo.export import export_nn

    name, preset = parse_name(spec)
    cfg = build_config(spec, **overrides)
    module, inputs = ZOO[name].builder(**cfg)
    label = name if preset == PAPER else f"{name}:{preset}"
    key = f"{label}:{sorted((k, v) for k, v in cfg.items() if k != 'recurrent')}"
    return export_nn(module, inputs, name=label, source=f"zoo:{label}", seed_key=key)
