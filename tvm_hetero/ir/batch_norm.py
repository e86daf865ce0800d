"""An inference batch normalization of constant parameters as a per-channel scale and shift."""

from __future__ import annotations

from typing import Any

import numpy as np


def scale_and_shift(attrs: Any, params: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``, float64 vectors over the channels, such that a ``relax.nn.batch_norm`` in
    inference with ``attrs`` (``scale``, ``center``, ``epsilon``) and the constant
    ``params`` ``[gamma, beta, mean, var]`` computes ``x * a + b`` along its axis:
    ``a = gamma / sqrt(var + eps)``, ``b = beta - mean * a`` (no ``gamma``, ``beta`` where
    the attributes say so)."""
    gamma, beta, mean, var = (p.astype("float64").reshape(-1) for p in params)
    a = (gamma if bool(attrs.scale) else 1.0) / np.sqrt(var + float(attrs.epsilon))
    return a, (beta if bool(attrs.center) else 0.0) - mean * a
