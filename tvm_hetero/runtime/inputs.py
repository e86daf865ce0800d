"""A model's data inputs: what the frontends find and what a deployment records."""

from __future__ import annotations

import math
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
    low : int or None
        With ``high``, the least valid value: ``-high`` where a negative id counts from the
        table's end (ONNX ``Gather``); ``None`` means 0.
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    high: int | None = None
    low: int | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of one value of this input (a symbolic dimension counted as 1: the least)."""
        dims = [d if isinstance(d, int) else 1 for d in self.shape]
        return math.prod(dims) * np.dtype(self.dtype).itemsize

    def random(self, rng: np.random.Generator) -> np.ndarray:
        """A random array that is a valid value for this input."""
        if any(not isinstance(d, int) for d in self.shape):
            raise ValueError(
                f"input {self.name!r} has a symbolic shape {self.shape}; give its value explicitly"
            )
        if np.issubdtype(np.dtype(self.dtype), np.integer):
            return rng.integers(0, self.high or 2, size=self.shape).astype(self.dtype)
        return rng.standard_normal(self.shape).astype(self.dtype)

    def check(self, value: object) -> np.ndarray:
        """``value`` as an array this input accepts, or a ``ValueError`` naming the input, what it
        got and what is allowed: the shape (a symbolic dimension takes any size), the dtype, and
        for an index input (token ids) every value in ``[low, high)``: an id out of range names
        no row of its table."""
        array = np.asarray(value)
        if array.dtype != np.dtype(self.dtype):
            raise ValueError(
                f"input {self.name!r}: dtype {array.dtype} given, the model takes {self.dtype}"
            )
        fits = array.ndim == len(self.shape) and all(
            not isinstance(d, int) or d == n for d, n in zip(self.shape, array.shape, strict=True)
        )
        if not fits:
            raise ValueError(
                f"input {self.name!r}: shape {tuple(array.shape)} given, the model takes "
                f"{tuple(self.shape)}"
            )
        if self.high is not None and array.size:
            least = 0 if self.low is None else self.low
            low, high = int(array.min()), int(array.max())
            if low < least or high >= self.high:
                bad = low if low < least else high
                raise ValueError(
                    f"input {self.name!r}: id {bad} is outside its table of {self.high} rows "
                    f"(allowed {least} .. {self.high - 1}); got {low} .. {high}"
                )
        return array
