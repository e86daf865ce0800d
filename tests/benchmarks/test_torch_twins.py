"""The torch twins that ONNX Runtime runs beside zoo models (``benchmarks/torch_twins.py``) have
the zoo model's inputs, outputs and weights: the same output shapes and as many weight elements,
but for the causal mask the zoo binds as a constant and the second bias of torch's LSTM cells
(the zoo's cells add the two as one)."""

import math
import sys
from pathlib import Path

import pytest
import tvm
from tvm import relax

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]

from torch_twins import TWINS, onnx_twin  # noqa: E402

from tvm_hetero.zoo import build_config, load_zoo_model  # noqa: E402


def _zoo(spec: str) -> tuple[list[tuple], list[tuple]]:
    """The zoo model's output shapes and its weights' shapes (the constants it binds)."""
    model = load_zoo_model(spec)
    ret = model.mod["main"].ret_ty
    fields = ret.fields if hasattr(ret, "fields") else [ret]
    weights: list[tuple] = []

    def visit(expr: tvm.ir.expr.Expr) -> None:
        if isinstance(expr, tvm.ir.expr.GenericConst) and len(expr.value.shape) > 0:
            weights.append(tuple(expr.value.shape))

    relax.analysis.post_order_visit(model.mod["main"].body, visit)
    return [tuple(int(d) for d in f.shape) for f in fields], sorted(weights)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_twin_has_the_zoo_models_shapes_and_weights(name, tmp_path):
    import onnxruntime as ort

    spec = f"{name}:tiny"
    path, feeds = onnx_twin(spec, tmp_path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shapes, zoo_weights = _zoo(spec)
    assert [o.shape for o in session.run(None, feeds)] == shapes
    cfg = build_config(spec)
    if name == "gpt2":  # the zoo binds its causal mask as a constant of each layer
        zoo_weights = [w for w in zoo_weights if w != (cfg["seq_len"],) * 2]
    net, _ = TWINS[name](cfg)
    import torch

    lstms = [m for m in net.modules() if isinstance(m, torch.nn.LSTM)]
    second = [p for m in lstms for n, p in m.named_parameters() if "bias_hh" in n]
    twin = sum(p.numel() for p in net.parameters()) - sum(p.numel() for p in second)
    assert twin == sum(math.prod(w) for w in zoo_weights)
