"""timm's ViT cut where EdgePipe can cut it: the embedding, each block's two residual halves, the
head. Shared by ``torch_pipelining.py`` (which exports the model and maps EdgePipe's stages onto
the pieces) and ``torch_stage.py`` (one pipeline stage in its own process)."""

from __future__ import annotations

import torch
from torch import nn


def vit(name: str, image: int) -> nn.Module:
    """timm's ``name`` with seeded random weights (no download), in eval mode."""
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, img_size=image).eval()


class Embed(nn.Module):
    """Patches, class token and position embedding."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.model
        return m.norm_pre(m.patch_drop(m._pos_embed(m.patch_embed(x))))

    def weights(self) -> list[nn.Parameter]:
        m = self.model
        return [*m.patch_embed.parameters(), m.cls_token, m.pos_embed, *m.norm_pre.parameters()]


class Half(nn.Module):
    """One residual half of a block: attention (``first``) or the MLP."""

    def __init__(self, block: nn.Module, first: bool) -> None:
        super().__init__()
        self.block, self.first = block, first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.block
        if self.first:
            return x + b.drop_path1(b.ls1(b.attn(b.norm1(x))))
        return x + b.drop_path2(b.ls2(b.mlp(b.norm2(x))))

    def weights(self) -> list[nn.Parameter]:
        b = self.block
        parts = (b.norm1, b.attn, b.ls1) if self.first else (b.norm2, b.mlp, b.ls2)
        return [p for part in parts for p in part.parameters()]


class Head(nn.Module):
    """The final norm and the classifier."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_head(self.model.norm(x))

    def weights(self) -> list[nn.Parameter]:
        m = self.model
        return [*m.norm.parameters(), *m.fc_norm.parameters(), *m.head.parameters()]


def pieces(model: nn.Module) -> list[nn.Module]:
    """The model as a sequence of pieces whose composition is the model."""
    halves = [Half(b, first) for b in model.blocks for first in (True, False)]
    return [Embed(model), *halves, Head(model)]


def weight_bytes(piece: nn.Module) -> int:
    """Bytes of the weights ``piece`` reads."""
    return sum(p.numel() * p.element_size() for p in piece.weights())
