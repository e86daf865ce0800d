"""TOPI's rational tanh and erf as float32 expressions, squaring no tiny argument.

``topi.fast_tanh`` and ``topi.fast_erf`` compute ``x P(x^2) / Q(x^2)`` over a clamped ``x``
(Eigen's approximations, within about 1e-6 of the exact functions). The square of a tiny
argument is a subnormal number, and every product it enters a microcode assist on x86: an erf
over arguments near 1e-22 took 43.7 ms for a million where normal ones take 0.5 (Intel Xeon).
Here the square of an argument under :data:`TINY` is taken as zero; the polynomials' constant
terms are then at least 1e18 times what the square would have added, so the same floats come
out. Found on transformers' PP-OCRv6 tiny recognizer, whose activations fade to about 1e-22
through its random layers before each GELU.
"""

from __future__ import annotations

from tvm import tirx

F32 = "float32"
TINY = 1e-10
"""Below this magnitude the square of the argument is taken as zero."""
FLUSH_TINY_SQUARES = True
"""Whether :func:`rational` does so (False: the square as it comes, to compare)."""

TANH_P = (
    4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
    -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16,
)  # fmt: skip
TANH_Q = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)
"""``topi.fast_tanh``'s odd numerator and even denominator over [-9, 9], lowest power first."""
ERF_P = (
    -1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05,
    -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10,
)  # fmt: skip
ERF_Q = (
    -1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03, -2.13374055278905e-04,
    -1.45660718464996e-05,
)  # fmt: skip
"""``topi.fast_erf``'s over [-4, 4], lowest power first."""


def f32(value: float) -> tirx.PrimExpr:
    """A float32 constant."""
    return tirx.const(value, F32)


def rational(v: tirx.PrimExpr, p: tuple, q: tuple) -> tirx.PrimExpr:
    """``v P(v^2) / Q(v^2)`` in TOPI's order of operations (Horner's rule, highest power first),
    the square taken as zero where ``|v|`` is under :data:`TINY`."""
    s = tirx.Select(tirx.abs(v) < f32(TINY), f32(0.0), v) if FLUSH_TINY_SQUARES else v
    x2 = s * s

    def horner(coefs: tuple) -> tirx.PrimExpr:
        out = x2 * f32(coefs[-1]) + f32(coefs[-2])
        for c in reversed(coefs[:-2]):
            out = x2 * out + f32(c)
        return out

    return v * horner(p) / horner(q)


def fast_tanh(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``tanh(x)``: ``x`` clamped to [-9, 9] as ``topi.fast_tanh`` clamps it, then
    :func:`rational`."""
    return rational(tirx.max(f32(-9.0), tirx.min(f32(9.0), x)), TANH_P, TANH_Q)


def fast_erf(x: tirx.PrimExpr) -> tirx.PrimExpr:
    """``erf(x)``: ``x`` clamped to [-4, 4] as ``topi.fast_erf`` clamps it, then
    :func:`rational`."""
    return rational(tirx.max(tirx.min(x, f32(4.0)), f32(-4.0)), ERF_P, ERF_Q)
