"""The Model every frontend returns: a Relax module with weights bound, plus its input specs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm


@dataclass(frozen=True)
class InputSpec:
    """One data input of a model.

    Attributes
    ----------
    name : str
        Parameter name in the entry function.
    shape : tuple[int | str, ...]
        Shape (a symbolic dimension is its name).
    dtype : str
        Element type.
    high : int or None
        For integer inputs (token ids), the exclusive upper bound of valid values.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    high: int | None = None

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """A random array that is a valid value for this input."""
        if any(not isinstance(d, int) for d in self.shape):
            raise ValueError(
                f"input {self.name!r} has a symbolic shape {self.shape}; give its value explicitly"
            )
        if np.issubdtype(np.dtype(self.dtype), np.integer):
            return rng.integers(0, self.high or 2, size=self.shape).astype(self.dtype)
        return rng.standard_normal(self.shape).astype(self.dtype)


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

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Deterministic random values for every input."""
        rng = np.random.default_rng(seed)
        return {spec.name: spec.random(rng) for spec in self.inputs}
