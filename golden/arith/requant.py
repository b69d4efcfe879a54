"""Golden models of the requantizer: ``y = clamp(round_half_even(x * M / 2**shift))``.

:func:`requantize` is the bit-exact model, vectorized over NumPy arrays of ``int64`` where every
product and shifted remainder fits 63 bits and of Python integers (object arrays) where it does
not (``x * M`` needs up to 64 bits plus a sign): the same operations on either. The product is
shifted right by ``shift`` (an arithmetic shift, i.e. floor division), then rounded by the dropped bits (up when
they exceed one half, or equal one half and the floor is odd), then saturated. :func:`reference`
is the naive independent check: ``fractions.Fraction`` arithmetic and Python's ``round`` (which
rounds half to even), one value at a time.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["CLAMPS", "limits", "requantize", "reference"]

#: Saturation ranges by name: "symmetric" [-(2**(b-1) - 1), 2**(b-1) - 1] (int8: [-127, 127]),
#: "full" [-2**(b-1), 2**(b-1) - 1] (int8: [-128, 127]).
CLAMPS = ("symmetric", "full")


def limits(out_bits: int, clamp: str) -> tuple[int, int]:
    """Return the least and greatest output for ``out_bits`` and the clamp name."""
    if clamp not in CLAMPS:
        raise ValueError(f"clamp must be 'symmetric' or 'full', not {clamp!r}")
    hi = (1 << (out_bits - 1)) - 1
    return (-hi if clamp == "symmetric" else -hi - 1), hi


_as_int = np.vectorize(int, otypes=[object])


def _exact(values) -> np.ndarray:
    """An object array of Python integers (NumPy integers would overflow in the wide products)."""
    return _as_int(np.asarray(values, dtype=object))


#: Largest shift and product magnitude (exclusive, as powers of two) computed in int64: the
#: remainder doubled stays below ``2**(shift + 1) <= 2**62``, the product below ``2**62``.
_INT64_SHIFT, _INT64_PRODUCT = 61, 62


def _int64_safe(x, m, shift) -> bool:
    arrays = [np.asarray(v) for v in (x, m, shift)]
    if any(a.dtype.kind not in "iu" or a.size == 0 for a in arrays):
        return False
    x, m, shift = arrays
    big = max(abs(int(x.min())), abs(int(x.max()))) * max(abs(int(m.min())), abs(int(m.max())))
    return big < (1 << _INT64_PRODUCT) and 0 <= int(shift.min()) and \
        int(shift.max()) <= _INT64_SHIFT


def requantize(x, m, shift, *, out_bits: int = 8, clamp: str = "symmetric",
               exact: bool = False) -> np.ndarray:
    """Return ``clamp(round_half_even(x * m / 2**shift))`` as ``int64`` (bit-exact model).

    ``x``, ``m`` and ``shift`` are integers or arrays of them (broadcast); ``shift >= 0``.
    ``exact`` forces Python integers where ``int64`` would do (the tests compare the two).
    """
    lo, hi = limits(out_bits, clamp)
    if not exact and _int64_safe(x, m, shift):
        kind = np.int64
        x, m, shift = np.broadcast_arrays(*(np.asarray(v).astype(np.int64) for v in (x, m, shift)))
    else:
        kind = object
        x, m, shift = np.broadcast_arrays(_exact(x), _exact(m), _exact(shift))
    product = x * m
    floor = product >> shift
    remainder = product - (floor << shift)          # in [0, 2**shift)
    twice = remainder << 1
    half_or_more = twice >= (np.ones_like(shift) << shift)
    tie = twice == (np.ones_like(shift) << shift)
    up = np.where(tie, (floor & 1) == 1, half_or_more) & (shift > 0)
    rounded = floor + np.asarray(up).astype(kind)
    return np.clip(rounded, lo, hi).astype(np.int64)


def reference(x: int, m: int, shift: int, *, out_bits: int = 8, clamp: str = "symmetric") -> int:
    """One value, independently: exact rational, round half to even, saturate."""
    lo, hi = limits(out_bits, clamp)
    return max(lo, min(hi, round(Fraction(int(x) * int(m), 2 ** int(shift)))))


def corner_cases(in_bits: int = 32, mult_bits: int = 32, mult_signed: bool = True,
                 out_bits: int = 8, shift_max: int = 63) -> list[tuple[int, int, int]]:
    """Return directed ``(x, m, shift)`` stimulus: the edges of every operand and of the rounding
    and saturation rules (stimulus only; expected values come from :func:`requantize`).

    Ties ``k + 1/2`` for even and odd ``k`` of both signs; values one below, at and one above
    each saturation limit and each limit plus or minus one half; the most negative and greatest
    inputs with the extreme multipliers; zero; shifts 0, 1, the product width and ``shift_max``.
    """
    x_lo, x_hi = -(1 << (in_bits - 1)), (1 << (in_bits - 1)) - 1
    m_lo, m_hi = (-(1 << (mult_bits - 1)), (1 << (mult_bits - 1)) - 1) if mult_signed \
        else (0, (1 << mult_bits) - 1)
    o_hi = (1 << (out_bits - 1)) - 1
    cases = []
    # Ties and near-ties at shift 1..4 with m = 1: x / 2**s = k + {1/2, 1/2 -+ 2**-s}.
    for s in (1, 2, 3, 4):
        for k in (0, 1, 2, 3, -1, -2, -3, -4, o_hi - 1, o_hi, -o_hi - 1, -o_hi - 2):
            for frac in (0, (1 << (s - 1)) - 1, 1 << (s - 1), (1 << (s - 1)) + 1,
                         (1 << s) - 1):
                x = (k << s) + frac
                if x_lo <= x <= x_hi:
                    cases.append((x, 1, s))
    # Saturation limits exactly at and beyond, at shift 0 and via the multiplier.
    for y in (o_hi - 1, o_hi, o_hi + 1, o_hi + 2, -o_hi + 1, -o_hi, -o_hi - 1, -o_hi - 2):
        if x_lo <= y <= x_hi:
            cases.append((y, 1, 0))
    # Operand extremes with every extreme multiplier and shift.
    shifts = sorted({0, 1, in_bits - 1, min(shift_max, in_bits + mult_bits - 2),
                     min(shift_max, in_bits + mult_bits - 1), min(shift_max, in_bits + mult_bits),
                     shift_max})
    for x in (x_lo, x_lo + 1, -1, 0, 1, x_hi):
        for mult in sorted({m_lo, m_lo + 1, 0, 1, m_hi, (m_hi >> 1) + 1}):
            if m_lo <= mult <= m_hi:
                for s in shifts:
                    cases.append((x, mult, s))
    return cases
