"""Convolutional models: ResNet-18/50 (EOP, FlexPie, DUET) and MobileNet v1 (EOP, FlexPie)."""

from __future__ import annotations

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import Tensor, op

from tvm_hetero.frontends.model import InputSpec
from tvm_hetero.zoo.layers import ConvBN, global_avg_pool, max_pool


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions and a residual connection."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        self.c1 = ConvBN(cin, width, 3, stride)
        self.c2 = ConvBN(width, width, 3, relu=False)
        self.down = (
            ConvBN(cin, width, 1, stride, relu=False) if stride != 1 or cin != width else None
        )

    def forward(self, x: Tensor) -> Tensor:
        skip = self.down(x) if self.down is not None else x
        return op.relu(self.c2(self.c1(x)) + skip)


class Bottleneck(nn.Module):
    """ResNet bottleneck block: 1x1, 3x3, 1x1 convolutions and a residual connection."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        cout = width * 4
        self.c1 = ConvBN(cin, width, 1)
        self.c2 = ConvBN(width, width, 3, stride)
        self.c3 = ConvBN(width, cout, 1, relu=False)
        self.down = ConvBN(cin, cout, 1, stride, relu=False) if stride != 1 or cin != cout else None

    def forward(self, x: Tensor) -> Tensor:
        skip = self.down(x) if self.down is not None else x
        return op.relu(self.c3(self.c2(self.c1(x))) + skip)


class ResNet(nn.Module):
    """ResNet with a 7x7 stem, max pooling, four stages and a classifier."""

    def __init__(self, block: str, stages: list[int], width: int, classes: int) -> None:
        kind = {"basic": BasicBlock, "bottleneck": Bottleneck}[block]
        self.stem = ConvBN(3, width, 7, 2)
        blocks, cin = [], width
        for i, depth in enumerate(stages):
            w = width * 2**i
            for j in range(depth):
                blocks.append(kind(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w * kind.expansion
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, image: Tensor) -> Tensor:
        x = max_pool(self.stem(image), 3, 2, 1)
        for block in self.blocks:
            x = block(x)
        return self.fc(global_avg_pool(x))


# MobileNet v1: (output channels, stride) of each depthwise-separable block.
MOBILENET_V1 = [
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
]  # fmt: skip


class MobileNet(nn.Module):
    """MobileNet v1: a 3x3 stem, depthwise 3x3 + pointwise 1x1 blocks, pooling and classifier."""

    def __init__(self, width: float, blocks: int, classes: int) -> None:
        def ch(c: int) -> int:
            return max(8, int(c * width))

        self.stem = ConvBN(3, ch(32), 3, 2)
        layers, cin = [], ch(32)
        for cout, stride in MOBILENET_V1[:blocks]:
            layers += [ConvBN(cin, cin, 3, stride, groups=cin), ConvBN(cin, ch(cout), 1)]
            cin = ch(cout)
        self.layers = nn.ModuleList(layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, image: Tensor) -> Tensor:
        x = self.stem(image)
        for layer in self.layers:
            x = layer(x)
        return self.fc(global_avg_pool(x))


def _image(batch: int, image: int) -> list[InputSpec]:
    return [InputSpec("image", (batch, 3, image, image), "float32")]


def build_resnet(batch: int, image: int, block: str, stages: list[int], width: int, classes: int):
    """A ResNet and its image input."""
    return ResNet(block, stages, width, classes), _image(batch, image)


def build_mobilenet(batch: int, image: int, width: float, blocks: int, classes: int):
    """MobileNet v1 and its image input."""
    return MobileNet(width, blocks, classes), _image(batch, image)
