"""Frontends: load ONNX, torch.export, relax.frontend.nn, TVMScript and zoo models."""

from tvm_hetero.frontends.load import (
    ModelLoadError,
    UnsupportedOperatorError,
    from_irmodule,
    load_model,
)
from tvm_hetero.frontends.model import InputSpec, Model

__all__ = [
    "InputSpec",
    "Model",
    "ModelLoadError",
    "UnsupportedOperatorError",
    "from_irmodule",
    "load_model",
]
