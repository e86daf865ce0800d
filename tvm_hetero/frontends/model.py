"""The Model every frontend returns: a Relax module with weights bound, plus its input specs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm

from tvm_hetero.runtime.inputs import InputSpec

__all__ = ["InputSpec", "Model"]


@dataclass(frozen=True)
class Model:
    """A loaded model.

    Attributes
    ----------
    name : str
        Display name (``bert-base``, a file name...).
    mod : tvm.IRModule
        Relax module whose entry function ``main`` takes only the data inputs; weights are bound
        as constants.
    inputs : tuple[InputSpec, ...]
        The data inputs of ``main``, in order.
    source : str
        Where the model came from (``zoo:bert-base:tiny``, ``onnx:path``...).
    """

    name: str
    mod: tvm.IRModule = field(repr=False)
    inputs: tuple[InputSpec, ...]
    source: str

    def weight_bytes(self) -> int:
        """Bytes of the constants bound in the module's Relax functions (its weights), each
        counted once however often it is used."""
        from tvm import relax

        found: dict[tvm.runtime.Tensor, int] = {}

        def visit(expr: tvm.ir.expr.Expr) -> None:
            if isinstance(expr, tvm.ir.expr.GenericConst):
                value = expr.value
                found[value] = int(np.prod(value.shape)) * np.dtype(value.dtype).itemsize

        for _, func in self.mod.functions_items():
            if isinstance(func, relax.Function):
                relax.analysis.post_order_visit(func.body, visit)
        return sum(found.values())

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic random values for every input."""
        rng = np.random.default_rng(seed)
        return {spec.name: spec.random(rng) for spec in self.inputs}
