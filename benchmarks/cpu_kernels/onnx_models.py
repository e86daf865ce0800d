"""The same networks for TVM and ONNX Runtime: torch modules exported to ONNX, single-op ONNX files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = self.ln1(x + self.out((att @ v).transpose(1, 2).reshape(b, s, d)))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class BertEncoder(nn.Module):
    """The issue's 4-layer encoder, d 256, 4 heads (input: embeddings)."""

    def __init__(self, layers: int = 4, d: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[EncoderLayer(d, heads) for _ in range(layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.down = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c2(torch.relu(self.c1(x)))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18(nn.Module):
    """ResNet-18 for 224x224 inputs, BatchNorm folded into the convolutions (inference)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(
            torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1)
        )


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(1024, 4096),
            nn.ReLU(),
            nn.Linear(4096, 4096),
            nn.ReLU(),
            nn.Linear(4096, 1000),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


MODELS = {
    "bert-encoder (4 x 256, seq 128)": (BertEncoder, (1, 128, 256)),
    "resnet18 (224x224)": (ResNet18, (1, 3, 224, 224)),
    "mlp (32 x 1024-4096-4096-1000)": (MLP, (32, 1024)),
}


def export_model(name: str, out_dir: Path) -> tuple[Path, tuple[int, ...]]:
    """``MODELS[name]`` with seeded weights as an ONNX file (input named ``x``)."""
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    module = cls().eval()
    path = out_dir / (name.split(" ")[0] + ".onnx")
    if not path.exists():
        torch.onnx.export(
            module, (torch.randn(*shape),), str(path), input_names=["x"], dynamo=True,
            external_data=False,
        )  # fmt: skip
    return path, shape


def export_case(build, shape: tuple[int, ...], path: Path) -> np.ndarray:
    """``build()`` (a torch module, seeded) exported to ``path`` by TorchScript with one input
    ``x`` of ``shape``; returns that input."""
    import warnings

    torch.manual_seed(0)
    x = torch.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(build().eval(), (x,), str(path), input_names=["x"], dynamo=False,
                          opset_version=17)  # fmt: skip
    return x.numpy()


def convolution(
    inputs: int, outputs: int, kernel: int, stride: int = 1, groups: int = 1
) -> nn.Module:  # fmt: skip
    """A convolution padded to keep the map (over its stride) with ReLU after it: the one-layer
    case of the convolution benchmarks."""
    conv = nn.Conv2d(inputs, outputs, kernel, stride, kernel // 2, groups=groups)
    return nn.Sequential(conv, nn.ReLU())


def export_convolution(
    path: Path, inputs: int, outputs: int, kernel: int, stride: int, height: int,
    width: int | None = None, groups: int = 1,
) -> np.ndarray:  # fmt: skip
    """:func:`convolution` over a batch-1 map of ``height`` x ``width`` (square without
    ``width``) exported to ``path``: a convolution benchmark's case; its input."""
    layer = lambda: convolution(inputs, outputs, kernel, stride, groups)  # noqa: E731
    return export_case(layer, (1, inputs, height, width or height), path)


def append_rows(rows: list[dict], name: str) -> None:
    """``rows`` as JSON lines at the end of ``benchmarks/results/NAME``."""
    import json

    with open(Path(__file__).resolve().parents[1] / "results" / name, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def matmul_onnx(a_shape, b_shape, weight: bool):  # -> onnx.ModelProto
    """``A @ B``; ``B`` is an initializer (a weight) when ``weight``."""
    from onnx import TensorProto, helper, numpy_helper  # the modules alone need torch only

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape))
    inputs, inits = [a], []
    if weight:
        rng = np.random.default_rng(0)
        inits.append(numpy_helper.from_array(rng.standard_normal(b_shape).astype("float32"), "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape)))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", inputs, [y], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def conv_onnx(x_shape, w_shape, strides, pads, groups):  # -> onnx.ModelProto
    """``Conv(x, W)`` with ``W`` as an initializer."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(rng.standard_normal(w_shape).astype("float32"), "w")
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], strides=list(strides), pads=list(pads), group=groups
    )
    graph = helper.make_graph([node], "conv", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
