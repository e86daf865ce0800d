"""Export an ``nn.Module`` to a :class:`Model` with deterministic random weights bound."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend import nn

from tvm_hetero.frontends.model import InputSpec, Model
from tvm_hetero.ir.attrs import ENTRY_FUNC


def export_nn(
    module: nn.Module, inputs: Sequence[InputSpec], *, name: str, source: str, seed_key: str
) -> Model:
    """Export ``module.forward`` with ``inputs``, bind seeded random weights, name it ``main``."""
    spec = {"forward": {i.name: nn.spec.Tensor(list(i.shape), i.dtype) for i in inputs}}
    mod, params = module.export_tvm(spec=spec)
    weights = init_weights(params, seed=zlib.crc32(seed_key.encode()))
    func = mod["forward"].with_attr("global_symbol", ENTRY_FUNC)
    out = tvm.IRModule({})
    out[ENTRY_FUNC] = func
    for gv, kernel in mod.functions_items():  # kernels the module calls (loop kernels)
        if gv.name_hint != "forward" and isinstance(kernel, tvm.tirx.PrimFunc):
            out[gv] = kernel
    out = relax.transform.BindParams(ENTRY_FUNC, weights)(out)
    return Model(name=name, mod=out, inputs=tuple(inputs), source=source)


def init_weights(params: Sequence[tuple[str, nn.Parameter]], seed: int) -> dict[str, np.ndarray]:
    """Scaled random weights that keep activations of deep stacks in range.

    Matrices and kernels get ``N(0, 1/fan_in)``; norms' scales are 1 and shifts 0; biases are small.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for pname, param in params:
        shape = [int(d) for d in param.shape]
        leaf = pname.rsplit(".", 1)[-1]
        is_norm = "norm" in pname or "ln" in pname.split(".")
        if is_norm and leaf == "weight":
            value = np.ones(shape)
        elif is_norm or leaf == "bias":
            value = 0.01 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            value = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        out[pname] = value.astype(param.dtype)
    return out
