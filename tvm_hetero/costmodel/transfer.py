"""Transfer cost: ``latency + bytes / bandwidth`` fitted to measured copies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TransferFit:
    """A fitted link: ``seconds(nbytes) = latency_s + nbytes / bandwidth_bps``.

    ``rel_error`` is the mean relative error of the fit on its own samples.
    """

    latency_s: float
    bandwidth_bps: float
    rel_error: float

    def seconds(self, nbytes: float) -> float:
        """Predicted time to copy ``nbytes``."""
        return self.latency_s + nbytes / self.bandwidth_bps


def fit_transfer(sizes_bytes: Sequence[float], seconds: Sequence[float]) -> TransferFit:
    """Fit latency and inverse bandwidth (both non-negative) minimising *relative* error.

    Copy times span orders of magnitude across sizes; plain least squares would fit the largest
    copies and ignore the latency that dominates small ones.

    Raises
    ------
    ValueError
        With fewer than two distinct sizes.
    """
    x = np.asarray(sizes_bytes, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if len(set(x.tolist())) < 2:
        raise ValueError("fit_transfer: need timings at two or more distinct sizes")
    from scipy.optimize import nnls

    weights = 1.0 / y
    coef, _ = nnls(np.stack([np.ones_like(x), x], axis=1) * weights[:, None], y * weights)
    latency, inv_bw = float(coef[0]), float(coef[1])
    inv_bw = max(inv_bw, 1e-15)
    predicted = latency + x * inv_bw
    return TransferFit(latency, 1.0 / inv_bw, float(np.mean(np.abs(predicted - y) / y)))
