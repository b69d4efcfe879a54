"""Golden models of the fp32 function units: exp2, reciprocal and reciprocal square root.

Each unit is specified as a fixed-point algorithm with exact integer widths, truncation points and
one final rounding to fp32 (round to nearest even, flush to zero); the functions here compute that
specification, vectorized over NumPy arrays of fp32 bit patterns (``np.uint32``), and return fp32
bit patterns. The float64 references (``*_reference``) are written independently and naively
(``np.exp2``, ``1 / x``, ``1 / np.sqrt(x)``) and bound how far the bit-exact models are from the
truth; the bounds are stated in docs/arith_func.md and checked in tests/test_arith_func_golden.py.

Algorithms (shared constants are module attributes; the RTL in hdl/arith/exp2.py and
hdl/arith/recip.py builds the same tables from the same formulas, on its own):

exp2
    ``x`` is converted to a two's-complement fixed-point number ``X`` with :data:`EXP2_FRAC` (24)
    fraction bits, truncating the magnitude (``|x| < 128``; larger magnitudes overflow or
    underflow). ``n = X >> 24`` (floor) and ``f = X mod 2**24``. ``f`` splits into a table index
    ``k`` (its top ``table_bits`` bits) and a remainder ``r`` (the other bits). ``2**f`` is the
    chord of ``2**t`` over segment ``k``::

        y = C0[k] + ((C1[k] * r) >> EXP2_SHIFT)       (units 2**-30, y in [1, 2))
        C0[k] = round(2**(k / 2**T) * 2**30)
        C1[k] = floor((2**((k + 1) / 2**T) - 2**(k / 2**T)) * 2**T * 2**17)

    and the result is ``y * 2**(n - 30)`` rounded to fp32. ``C0[0] = 2**30``, so integer inputs
    give ``2**n`` exactly.

reciprocal, rsqrt
    ``x = m * 2**e`` with ``m = M / 2**23`` in [1, 2). rsqrt works on ``u = m * 2**(e mod 2)`` in
    [1, 4) and the even exponent ``e - (e mod 2)``. A seed table indexed by the top
    :data:`SEED_BITS` (7) fraction bits of ``m`` (and, for rsqrt, the exponent parity) holds the
    value minimizing the worst relative error over its segment ``[a, b)``: ``2 / (a + b)``
    (reciprocal) or ``sqrt(2 / (a + b))`` (rsqrt), rounded to :data:`SEED_FRAC` (10) fraction
    bits. Then ``iterations`` Newton-Raphson steps in fixed point with :data:`NR_FRAC` (30)
    fraction bits, every shift a floor::

        reciprocal:  e = (2**53 - M * y) >> 23;              y += (y * e) >> 30
        rsqrt:       s = (y * y) >> 30;
                     e = (2**53 - U * s) >> 24;              y += (y * e) >> 30

    (``U = M << (e mod 2)``), and the result is ``y * 2**(-e - 30)`` (reciprocal) or
    ``y * 2**(-(e - e mod 2) / 2 - 30)`` (rsqrt) rounded to fp32.

Special values follow IEEE 754 with flush-to-zero: subnormal inputs are zeros, NaN gives the
canonical NaN (``0x7FC00000``), exp2(+inf) = +inf, exp2(-inf) = +0, exp2(x) = +inf for
``x >= 128`` and +0 for ``x < -126``; 1/(+-0) = +-inf, 1/(+-inf) = +-0, 1/x = +-0 for
``|x| > 2**126``; rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(x < 0) = NaN (also -inf),
rsqrt(+inf) = +0.
"""

from __future__ import annotations

import numpy as np

from hdl.arith.format import FP32

from .float import from_float, to_float

__all__ = ["EXP2_FRAC", "EXP2_C0_FRAC", "EXP2_C1_FRAC", "EXP2_SHIFT", "EXP2_TABLE_BITS",
           "SEED_BITS", "SEED_FRAC", "NR_FRAC", "ITERATIONS",
           "exp2_tables", "exp2_fixed", "exp2", "exp2_reference",
           "recip_seeds", "rsqrt_seeds", "recip_significand", "rsqrt_significand",
           "reciprocal", "rsqrt", "reciprocal_reference", "rsqrt_reference", "relative_error",
           "EXP2_ERROR", "RECIP_ERROR", "RSQRT_ERROR"]

#: Fraction bits of the fixed-point exp2 argument.
EXP2_FRAC = 24
#: Fraction bits of the exp2 table values C0 and of the result significand y.
EXP2_C0_FRAC = 30
#: Fraction bits of the exp2 chord slopes C1.
EXP2_C1_FRAC = 17
#: Right shift of C1 * r into units of 2**-30.
EXP2_SHIFT = EXP2_FRAC + EXP2_C1_FRAC - EXP2_C0_FRAC
#: Default table index bits of exp2 (128 segments).
EXP2_TABLE_BITS = 7

#: Mantissa bits indexing the reciprocal / rsqrt seed table.
SEED_BITS = 7
#: Fraction bits of the seeds.
SEED_FRAC = 10
#: Fraction bits of the Newton-Raphson iterate.
NR_FRAC = 30
#: Default Newton-Raphson iteration count.
ITERATIONS = 2

#: Relative error bounds of the default units for normal results, for error analyses of the
#: blocks built on them (docs/arith_func.md measures them): exp2 with 128 segments (worst 2**-18.04),
#: reciprocal and rsqrt with 2 Newton-Raphson steps (worst 2**-23.94 each, every significand).
EXP2_ERROR = 2.0 ** -17.9
RECIP_ERROR = 2.0 ** -23.9
RSQRT_ERROR = 2.0 ** -23.9

_MAN = FP32.man_bits          # 23
_BIAS = FP32.bias             # 127
_NAN = np.uint32(FP32.canonical_nan)
_INF = np.uint32(FP32.infinity(0))
_NINF = np.uint32(FP32.infinity(1))


def _fields(bits):
    bits = np.asarray(bits, dtype=np.uint32)
    sign = (bits >> 31).astype(np.int64)
    field = ((bits >> _MAN) & 0xFF).astype(np.int64)
    frac = (bits & ((1 << _MAN) - 1)).astype(np.int64)
    is_nan = (field == 0xFF) & (frac != 0)
    is_inf = (field == 0xFF) & (frac == 0)
    is_zero = field == 0                                  # FTZ: subnormals are zeros
    exp = field - _BIAS
    sig = np.where(is_zero, 0, frac | (1 << _MAN))
    return sign, exp, sig, is_zero, is_inf, is_nan


def _round(value):
    """Round exact float64 values (signed) to fp32 bit patterns (RNE, FTZ)."""
    return np.asarray(from_float(np.asarray(value, dtype=np.float64), FP32), dtype=np.uint32)


# ------------------------------------------------------------------------------------------------
# exp2


def exp2_tables(table_bits: int = EXP2_TABLE_BITS) -> tuple[np.ndarray, np.ndarray]:
    """Return the chord tables ``(C0, C1)`` (int64 arrays of ``2**table_bits`` entries)."""
    k = np.arange(1 << table_bits, dtype=np.float64)
    lo = np.exp2(k / (1 << table_bits))
    hi = np.exp2((k + 1) / (1 << table_bits))
    c0 = np.rint(lo * 2.0 ** EXP2_C0_FRAC).astype(np.int64)
    c1 = np.floor((hi - lo) * 2.0 ** (table_bits + EXP2_C1_FRAC)).astype(np.int64)
    return c0, c1


def exp2_fixed(bits, table_bits: int = EXP2_TABLE_BITS):
    """Return ``(n, y)``: the integer part of x and the significand of ``2**f`` (units 2**-30).

    Only meaningful where ``|x| < 128`` and x is finite.
    """
    sign, exp, sig, _, _, _ = _fields(bits)
    # |x| * 2**24 = sig * 2**(exp + 1) = (sig << 7) >> (6 - exp), truncated.
    shift = np.clip(6 - exp, 0, 63)
    mag = (sig << 7) >> shift
    fixed = np.where(sign == 1, -mag, mag)
    n = fixed >> EXP2_FRAC
    f = fixed & ((1 << EXP2_FRAC) - 1)
    rem_bits = EXP2_FRAC - table_bits
    k = f >> rem_bits
    r = f & ((1 << rem_bits) - 1)
    c0, c1 = exp2_tables(table_bits)
    y = c0[k] + ((c1[k] * r) >> EXP2_SHIFT)
    return n, y


def exp2(bits, table_bits: int = EXP2_TABLE_BITS) -> np.ndarray:
    """Return exp2 of fp32 bit patterns as fp32 bit patterns (the RTL's result, bit for bit)."""
    sign, exp, _, _, is_inf, is_nan = _fields(bits)
    big = (exp >= 7) & ~is_inf & ~is_nan              # |x| >= 128
    n, y = exp2_fixed(bits, table_bits)
    n = np.where(big, 0, n)
    value = np.ldexp(y.astype(np.float64), (n - EXP2_C0_FRAC).astype(np.int32))
    out = _round(value)
    out = np.where(n <= FP32.emin - 1, np.uint32(0), out)           # x < -126: +0 (FTZ)
    overflow = (big | is_inf) & (sign == 0)
    underflow = (big | is_inf) & (sign == 1)
    out = np.where(overflow, _INF, out)
    out = np.where(underflow, np.uint32(0), out)
    return np.where(is_nan, _NAN, out).astype(np.uint32)


def exp2_reference(bits) -> np.ndarray:
    """float64 ``2**x`` of fp32 bit patterns (subnormal inputs read as zero; inf past 2**1024)."""
    with np.errstate(over="ignore"):            # overflow to inf is the intended reference
        return np.exp2(to_float(np.asarray(bits, dtype=np.uint32), FP32))


# ------------------------------------------------------------------------------------------------
# reciprocal and rsqrt


def recip_seeds() -> np.ndarray:
    """Return the reciprocal seed table: ``round(2 / (a + b) * 2**10)`` per segment."""
    k = np.arange(1 << SEED_BITS, dtype=np.float64)
    a = 1 + k / (1 << SEED_BITS)
    b = 1 + (k + 1) / (1 << SEED_BITS)
    return np.rint(2 / (a + b) * (1 << SEED_FRAC)).astype(np.int64)


def rsqrt_seeds() -> np.ndarray:
    """Return the rsqrt seed table, shape ``(2, 2**7)``: [exponent parity, mantissa index]."""
    k = np.arange(1 << SEED_BITS, dtype=np.float64)
    out = []
    for parity in (0, 1):
        a = (1 + k / (1 << SEED_BITS)) * 2 ** parity
        b = (1 + (k + 1) / (1 << SEED_BITS)) * 2 ** parity
        out.append(np.rint(np.sqrt(2 / (a + b)) * (1 << SEED_FRAC)).astype(np.int64))
    return np.stack(out)


def _seed_index(sig):
    return (sig >> (_MAN - SEED_BITS)) & ((1 << SEED_BITS) - 1)


def recip_significand(sig, iterations: int = ITERATIONS, *, trace: list | None = None):
    """Return y ~ 2**53 / sig (units 2**-30) for significands ``sig`` in [2**23, 2**24).

    ``trace``, if given, receives the error term ``e`` of every iteration.
    """
    sig = np.asarray(sig, dtype=np.int64)
    y = recip_seeds()[_seed_index(sig)] << (NR_FRAC - SEED_FRAC)
    for _ in range(iterations):
        e = ((1 << (_MAN + NR_FRAC)) - sig * y) >> _MAN
        if trace is not None:
            trace.append(e)
        y = y + ((y * e) >> NR_FRAC)
    return y


def rsqrt_significand(sig, parity, iterations: int = ITERATIONS, *,
                      trace: list | None = None):
    """Return y ~ 1 / sqrt(u) (units 2**-30), ``u = sig * 2**parity / 2**23`` in [1, 4)."""
    sig = np.asarray(sig, dtype=np.int64)
    parity = np.asarray(parity, dtype=np.int64)
    u = sig << parity
    y = rsqrt_seeds()[parity, _seed_index(sig)] << (NR_FRAC - SEED_FRAC)
    for _ in range(iterations):
        s = (y * y) >> NR_FRAC
        e = ((1 << (_MAN + NR_FRAC)) - u * s) >> (_MAN + 1)
        if trace is not None:
            trace.append(e)
        y = y + ((y * e) >> NR_FRAC)
    return y


def reciprocal(bits, iterations: int = ITERATIONS) -> np.ndarray:
    """Return 1/x of fp32 bit patterns as fp32 bit patterns (the RTL's result, bit for bit)."""
    sign, exp, sig, is_zero, is_inf, is_nan = _fields(bits)
    finite = ~is_zero & ~is_inf & ~is_nan
    y = recip_significand(np.where(finite, sig, 1 << _MAN), iterations)
    value = np.ldexp(y.astype(np.float64), np.where(finite, -exp - NR_FRAC, 0).astype(np.int32))
    out = _round(np.where(sign == 1, -value, value))
    signbit = (sign.astype(np.uint32) << 31)
    out = np.where(is_zero, _INF | signbit, out)
    out = np.where(is_inf, signbit, out)
    return np.where(is_nan, _NAN, out).astype(np.uint32)


def rsqrt(bits, iterations: int = ITERATIONS) -> np.ndarray:
    """Return 1/sqrt(x) of fp32 bit patterns as fp32 bit patterns (bit-exact with the RTL)."""
    sign, exp, sig, is_zero, is_inf, is_nan = _fields(bits)
    finite = ~is_zero & ~is_inf & ~is_nan
    parity = exp & 1
    y = rsqrt_significand(np.where(finite, sig, 1 << _MAN), parity, iterations)
    half = np.where(finite, -((exp - parity) >> 1) - NR_FRAC, 0).astype(np.int32)
    out = _round(np.ldexp(y.astype(np.float64), half))
    out = np.where(is_zero, _INF | (sign.astype(np.uint32) << 31), out)
    out = np.where(is_inf & (sign == 0), np.uint32(0), out)
    out = np.where(is_nan | ((sign == 1) & ~is_zero), _NAN, out)
    return out.astype(np.uint32)


def reciprocal_reference(bits) -> np.ndarray:
    """float64 ``1 / x`` of fp32 bit patterns (subnormal inputs read as zero)."""
    with np.errstate(divide="ignore"):
        return 1.0 / to_float(np.asarray(bits, dtype=np.uint32), FP32)


def rsqrt_reference(bits) -> np.ndarray:
    """float64 ``1 / sqrt(x)`` of fp32 bit patterns (subnormal inputs read as zero)."""
    x = to_float(np.asarray(bits, dtype=np.uint32), FP32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(x)


def relative_error(bits, reference) -> np.ndarray:
    """Return ``|result - reference| / |reference|`` (float64) of fp32 results ``bits``."""
    got = to_float(np.asarray(bits, dtype=np.uint32), FP32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(got - reference) / np.abs(reference)
