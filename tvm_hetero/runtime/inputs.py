"""A model's data inputs: what the frontends find and what a deployment records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
