"""Bit-exact NumPy models of the floating-point units (multiply, add, multiply-add, conversions,
dot product) and the format helpers other golden models reuse.

Float values travel as unsigned bit patterns (``np.uint16`` for bf16/fp16, ``np.uint32`` for fp32)
so NaN payloads and signed zeros compare exactly. The models follow the specification in
:mod:`hdl.arith.format` and :mod:`hdl.arith.float`, computed with NumPy and ``ml_dtypes``:

* inputs: subnormal codes read as zero of the same sign (flush-to-zero);
* every result is the IEEE 754 result in the result format (round to nearest even, gradual
  underflow) with subnormal results then flushed to zero of the same sign, and every NaN result
  replaced by the format's canonical NaN.

Each operation is computed once exactly or with a rounding that provably does not change the final
result, then rounded once to the result format: a product of two formats of at most 24 significand
bits is exact in float64 (48 <= 53 bits); a sum of two fp32 values rounded to float64 and then to
fp32 equals the directly rounded sum, because float64 has at least ``2p + 2`` bits for ``p = 24``
(Figueroa, "When is double rounding innocuous?", 1995); the same holds for bf16 and fp16.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hdl.arith.format import BF16, FP16, FP32, FloatFormat

__all__ = ["storage", "numpy_dtype", "ftz", "to_float", "from_float", "canonical", "fmul",
           "fadd", "fmac", "fconvert", "int_to_float", "fdot", "ulp_error", "corner_codes",
           "random_codes", "operand_pairs"]

_DTYPES = {BF16: ml_dtypes.bfloat16, FP16: np.float16, FP32: np.float32}


def _check(fmt: FloatFormat):
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"golden float models take a FloatFormat ("
                        f"{', '.join(f.name.upper() for f in _DTYPES)} from hdl.arith.format), "
                        f"not the {type(fmt).__name__} {fmt!r}")
    if fmt not in _DTYPES:
        raise ValueError(f"golden float models cover {', '.join(f.name for f in _DTYPES)}, "
                         f"not the format {fmt.name}")


def storage(fmt: FloatFormat):
    """The unsigned integer dtype holding ``fmt`` bit patterns."""
    _check(fmt)
    return np.uint16 if fmt.width == 16 else np.uint32


def numpy_dtype(fmt: FloatFormat):
    """The NumPy (or ml_dtypes) float dtype of ``fmt``."""
    _check(fmt)
    return _DTYPES[fmt]


def _bits(bits, fmt: FloatFormat) -> np.ndarray:
    return np.asarray(bits).astype(np.uint64).astype(storage(fmt))


def ftz(bits, fmt: FloatFormat) -> np.ndarray:
    """Flush subnormal codes to zero of the same sign; other codes are returned unchanged."""
    bits = _bits(bits, fmt)
    exp_mask = storage(fmt)(fmt.exp_max_field << fmt.man_bits)
    sign = storage(fmt)(1 << (fmt.width - 1))
    return np.where((bits & exp_mask) == 0, bits & sign, bits).astype(storage(fmt))


def canonical(bits, fmt: FloatFormat) -> np.ndarray:
    """Replace every NaN code by ``fmt.canonical_nan``."""
    bits = _bits(bits, fmt)
    exp_mask = fmt.exp_max_field << fmt.man_bits
    man_mask = (1 << fmt.man_bits) - 1
    is_nan = ((bits & exp_mask) == exp_mask) & ((bits & man_mask) != 0)
    return np.where(is_nan, fmt.canonical_nan, bits).astype(storage(fmt))


def to_float(bits, fmt: FloatFormat) -> np.ndarray:
    """Return the float64 values of ``fmt`` bit patterns, subnormal codes read as signed zero."""
    with np.errstate(invalid="ignore"):
        return ftz(bits, fmt).view(numpy_dtype(fmt)).astype(np.float64)


def from_float(x, fmt: FloatFormat) -> np.ndarray:
    """Round float64 values to ``fmt`` bit patterns.

    One rounding to nearest even (NumPy / ml_dtypes convert float64 directly), overflow to
    infinity, subnormal results flushed to zero of the same sign, NaN to the canonical NaN.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if fmt == BF16:
            # ml_dtypes rounds float64 to bfloat16 through float32 (two roundings: 1 + 2**-8 +
            # 2**-30 would become 1.0). Round to float32 by round-to-odd instead, which makes
            # the second rounding exact (24 >= 8 + 2 bits).
            x = _round_to_odd_float32(x)
        bits = x.astype(numpy_dtype(fmt)).view(storage(fmt))
    return canonical(ftz(bits, fmt), fmt)


def _round_to_odd_float32(x: np.ndarray) -> np.ndarray:
    """Round float64 to float32 toward zero, setting the LSB when inexact (round to odd)."""
    y = x.astype(np.float32)
    inexact = np.isfinite(x) & (y.astype(np.float64) != x)
    too_big = inexact & (np.abs(y.astype(np.float64)) > np.abs(x))
    y = np.where(too_big, np.nextafter(y, np.float32(0)), y)
    bits = y.view(np.uint32) | np.where(inexact, np.uint32(1), np.uint32(0))
    return bits.view(np.float32)


def fmul(a, b, a_fmt: FloatFormat, b_fmt: FloatFormat, out_fmt: FloatFormat) -> np.ndarray:
    """Product ``a * b`` rounded once to ``out_fmt`` (the float64 product is exact)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return from_float(to_float(a, a_fmt) * to_float(b, b_fmt), out_fmt)


def fadd(a, b, fmt: FloatFormat) -> np.ndarray:
    """Sum ``a + b`` in ``fmt`` (``x + (-x)`` is +0; ``inf - inf`` is NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return from_float(to_float(a, fmt) + to_float(b, fmt), fmt)


def fmac(a, b, c, in_fmt: FloatFormat, acc_fmt: FloatFormat) -> np.ndarray:
    """``a * b + c``, not fused: the product is rounded to ``acc_fmt``, then the sum."""
    return fadd(fmul(a, b, in_fmt, in_fmt, acc_fmt), c, acc_fmt)


def fconvert(x, in_fmt: FloatFormat, out_fmt: FloatFormat) -> np.ndarray:
    """Convert ``in_fmt`` codes to ``out_fmt`` (round to nearest even, overflow to infinity)."""
    return from_float(to_float(x, in_fmt), out_fmt)


def int_to_float(values, int_bits: int, fmt: FloatFormat) -> np.ndarray:
    """Convert ``int_bits``-bit two's complement codes (given as unsigned codes or signed integers)
    to ``fmt``, rounding to nearest even (exact in float64 up to 53 bits)."""
    if not 2 <= int_bits <= 53:
        raise ValueError(f"golden integer width must be between 2 and 53, not {int_bits}")
    v = np.asarray(values).astype(np.int64) & ((1 << int_bits) - 1)
    v = np.where(v >= 1 << (int_bits - 1), v - (1 << int_bits), v)
    return from_float(v.astype(np.float64), fmt)


def fdot(a, b, in_fmt: FloatFormat, acc_fmt: FloatFormat = FP32) -> np.ndarray:
    """Dot products of rows: ``a``, ``b`` of shape ``(..., lanes)`` with ``lanes`` a power of two.

    Products rounded to ``acc_fmt`` (exact for bf16/fp16 into fp32), then summed pairwise in a
    binary tree, each node rounded to ``acc_fmt``: level 1 adds lanes (0, 1), (2, 3) ...; each next
    level adds neighbouring pairs of the previous level's sums, down to one value.
    """
    level = fmul(a, b, in_fmt, in_fmt, acc_fmt)
    lanes = level.shape[-1]
    if lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"lane count must be a power of two, not {lanes}")
    while level.shape[-1] > 1:
        level = fadd(level[..., 0::2], level[..., 1::2], acc_fmt)
    return level[..., 0]


def ulp_error(got, want, fmt: FloatFormat) -> np.ndarray:
    """Distance in units of ``fmt``'s last place between finite codes of the same sign (debug)."""
    return np.abs(_bits(got, fmt).astype(np.int64) - _bits(want, fmt).astype(np.int64))


# --------------------------------------------------------------------------------------------------
# Stimulus shared by the testbenches and the golden tests (operand codes only, never results).


def corner_codes(fmt: FloatFormat) -> list[int]:
    """Codes every unit sees: signed zeros, subnormals (read as zeros), infinities, NaNs (canonical,
    other payloads, negative), the smallest and largest normals and their neighbours, one and its
    neighbours, two and a half."""
    man = (1 << fmt.man_bits) - 1
    sign = 1 << (fmt.width - 1)
    codes = [0, 1, man, fmt.min_normal, fmt.min_normal + 1, fmt.max_normal, fmt.max_normal - 1,
             fmt.infinity(), fmt.canonical_nan, fmt.infinity() | 1, fmt.infinity() | man,
             fmt.pack(0, fmt.bias, 0), fmt.pack(0, fmt.bias, 1), fmt.pack(0, fmt.bias - 1, man),
             fmt.pack(0, fmt.bias + 1, 0), fmt.pack(0, fmt.bias - 1, 0),
             fmt.pack(0, fmt.bias, man), fmt.pack(0, fmt.bias + 1, 1 << (fmt.man_bits - 1))]
    return codes + [c | sign for c in codes]


def random_codes(rng: np.random.Generator, fmt: FloatFormat, count: int, *,
                 exp_spread: int | None = None, short: float = 0.3) -> np.ndarray:
    """Random codes: uniformly random bit patterns, or with ``exp_spread`` exponents within
    ``exp_spread`` of 1.0; a fraction ``short`` of them have only their top few fraction bits set
    (so that sums and products often land exactly on rounding ties)."""
    bits = rng.integers(0, 1 << fmt.width, count, dtype=np.uint64)
    if exp_spread is not None:
        exp = rng.integers(fmt.bias - exp_spread, fmt.bias + exp_spread + 1, count)
        exp = np.clip(exp, 1, fmt.exp_max_field - 1).astype(np.uint64)
        mask = np.uint64(~(fmt.exp_max_field << fmt.man_bits) & ((1 << fmt.width) - 1))
        bits = (bits & mask) | (exp << np.uint64(fmt.man_bits))
    keep = rng.integers(1, 4, count).astype(np.uint64)
    low = (np.uint64(1) << (np.uint64(fmt.man_bits) - keep)) - np.uint64(1)
    bits = np.where(rng.random(count) < short, bits & ~low, bits)
    return bits.astype(storage(fmt))


def operand_pairs(rng: np.random.Generator, a_fmt: FloatFormat, b_fmt: FloatFormat,
                  count: int, *, add: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Operand pairs: every pair of corner codes, then ``count`` random pairs of four kinds
    (uniform codes; exponents near 1.0; for ``add`` near-cancelling pairs and pairs whose exponent
    difference is about the precision; for products pairs near the overflow and underflow
    thresholds of ``a_fmt`` x ``b_fmt``)."""
    ca, cb = corner_codes(a_fmt), corner_codes(b_fmt)
    a = [x for x in ca for _ in cb]
    b = [y for _ in ca for y in cb]
    quarter = max(1, count // 4)
    a += list(random_codes(rng, a_fmt, quarter, short=0.1))
    b += list(random_codes(rng, b_fmt, quarter, short=0.1))
    a += list(random_codes(rng, a_fmt, quarter, exp_spread=8))
    b += list(random_codes(rng, b_fmt, quarter, exp_spread=8))
    if add:
        x = random_codes(rng, a_fmt, 2 * quarter, exp_spread=a_fmt.bias - 1)
        flip = rng.integers(0, 1 << (a_fmt.precision + 2), 2 * quarter)
        flip = np.where(rng.random(2 * quarter) < 0.3, 0, flip).astype(np.uint64)
        y = (x.astype(np.uint64) ^ flip ^ np.uint64(1 << (a_fmt.width - 1)))
        half = quarter
        # Exponent differences around the precision: alignment shifts all of the way out.
        shift = rng.integers(0, a_fmt.precision + 4, half).astype(np.uint64)
        y[:half] = np.clip(x[:half].astype(np.int64) - (shift << np.uint64(a_fmt.man_bits))
                           .astype(np.int64), 0, None).astype(np.uint64) ^ \
            (rng.integers(0, 2, half).astype(np.uint64) << np.uint64(a_fmt.width - 1))
        a += list(x)
        b += list(y.astype(storage(a_fmt)))
    else:
        # Exponents whose sum lands near the result range limits (overflow and underflow).
        for _ in range(2):
            x = random_codes(rng, a_fmt, quarter, exp_spread=a_fmt.bias - 1)
            y = random_codes(rng, b_fmt, quarter, exp_spread=b_fmt.bias - 1)
            a += list(x)
            b += list(y)
    return np.array(a, dtype=storage(a_fmt)), np.array(b, dtype=storage(b_fmt))
