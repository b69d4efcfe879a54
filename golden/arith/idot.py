"""Golden models of the lane-parallel integer dot product, and the tree summation order.

:func:`pairwise_reduce` is the reduction order of every memwall adder tree (``hdl.arith.tree``),
written from its specification: neighbours combined left to right, level by level, the odd last
value passed to the next level. The floating dot product's golden model uses it with a bit-exact
fp32 adder as the combine step; the integer dot product's order does not matter (integer addition
is exact and associative), and :func:`dot` is a plain ``int64`` dot product.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["pairwise_reduce", "product_bounds", "sum_bounds", "signed_width", "dot",
           "dot_reference"]


def pairwise_reduce(x: np.ndarray, combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
                    axis: int = -1) -> np.ndarray:
    """Reduce ``x`` along ``axis`` in the adder-tree order, vectorized over the other axes.

    Level by level: ``combine(x[0], x[1])``, ``combine(x[2], x[3])``, ...; an odd last element is
    carried to the next level unchanged. Five lanes give
    ``combine(combine(combine(x0, x1), combine(x2, x3)), x4)``.
    """
    level = np.moveaxis(np.asarray(x), axis, -1)
    if level.shape[-1] == 0:
        raise ValueError("cannot reduce an empty axis")
    while level.shape[-1] > 1:          # one vectorized combine per tree level
        pairs = level.shape[-1] // 2
        summed = combine(level[..., 0:2 * pairs:2], level[..., 1:2 * pairs:2])
        level = np.concatenate([summed, level[..., 2 * pairs:]], axis=-1)
    return level[..., 0]


def _range(bits: int, signed: bool = True) -> tuple[int, int]:
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def product_bounds(a_bits: int, b_bits: int) -> tuple[int, int]:
    """Return the least and greatest product of a signed ``a_bits`` and a signed ``b_bits``
    integer."""
    (a_lo, a_hi), (b_lo, b_hi) = _range(a_bits), _range(b_bits)
    corners = [a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi]
    return min(corners), max(corners)


def sum_bounds(lanes: int, a_bits: int, b_bits: int) -> tuple[int, int]:
    """Return the least and greatest dot product over ``lanes`` lanes."""
    lo, hi = product_bounds(a_bits, b_bits)
    return lanes * lo, lanes * hi


def signed_width(lo: int, hi: int) -> int:
    """Return the fewest bits of a two's-complement integer holding every value in [lo, hi]."""
    bits = 1
    while not (-(1 << (bits - 1)) <= lo and hi <= (1 << (bits - 1)) - 1):
        bits += 1
    return bits


def dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return the exact dot products of ``a`` and ``b`` (shape ``(..., lanes)``) as ``int64``.

    The inputs are signed integers (any integer dtype); ``int64`` holds every sum the unit can
    produce (at most 64 lanes of 16 x 16-bit products, under 2**37).
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.shape != b.shape:
        raise ValueError(f"operand shapes differ: {a.shape} and {b.shape}")
    return np.einsum("...i,...i->...", a, b, dtype=np.int64)


def dot_reference(a, b) -> list[int]:
    """Exact reference with Python integers, written naively (row by row, lane by lane)."""
    rows_a = np.asarray(a).reshape(-1, np.shape(a)[-1]).tolist()
    rows_b = np.asarray(b).reshape(-1, np.shape(b)[-1]).tolist()
    return [sum(int(x) * int(y) for x, y in zip(ra, rb)) for ra, rb in zip(rows_a, rows_b)]
