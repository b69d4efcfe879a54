"""Floating-point golden models: hand-computed answers first, then NumPy float32 / float16 /
bfloat16 arithmetic with flush-to-zero on a million random pairs, then the float64 reference
(error bounds and the exact-product claims)."""

import struct

import ml_dtypes
import numpy as np
import pytest

from golden.arith.float import (canonical, corner_codes, fadd, fconvert, fdot, fmac, fmul,
                                from_float, ftz, int_to_float, operand_pairs, random_codes,
                                to_float)
from hdl.arith.format import BF16, FP16, FP32

SEED = 20261121
F32_NAN, BF16_NAN, FP16_NAN = 0x7FC00000, 0x7FC0, 0x7E00


def f32(x: float) -> int:
    """fp32 code of a value that is exactly representable (checked)."""
    code = struct.unpack("<I", struct.pack("<f", x))[0]
    assert struct.unpack("<f", struct.pack("<I", code))[0] == x
    return code


# ---- format helpers ------------------------------------------------------------------------


def test_to_float_flushes_subnormals_and_keeps_signs():
    got = to_float([0x00000001, 0x807FFFFF, 0x00800000, 0x80000000, 0x3F800000], FP32)
    assert got.tolist() == [0.0, 0.0, 2.0 ** -126, 0.0, 1.0]
    assert np.signbit(got).tolist() == [False, True, False, True, False]
    assert to_float([0x0001, 0x8400, 0x3C00], FP16).tolist() == [0.0, -(2.0 ** -14), 1.0]
    assert to_float([0x007F, 0x0080, 0x3F80], BF16).tolist() == [0.0, 2.0 ** -126, 1.0]


def test_ftz_and_canonical():
    assert ftz([0x807FFFFF, 0x00000001, 0x00800000], FP32).tolist() == [0x80000000, 0, 0x00800000]
    assert canonical([0xFFC00001, 0x7F800001, 0x7F800000], FP32).tolist() == \
        [F32_NAN, F32_NAN, 0x7F800000]


@pytest.mark.parametrize("x, fmt, code", [
    (1 + 2 ** -8, BF16, 0x3F80),                      # tie -> even
    (1 + 3 * 2 ** -8, BF16, 0x3F82),                  # tie -> even (up)
    (1 + 2 ** -8 + 2 ** -30, BF16, 0x3F81),           # just above the tie: no double rounding
    (2 - 2 ** -9, BF16, 0x4000),                      # rounds up into the next binade
    (2.0 ** -126 * (1 - 2 ** -8), BF16, 0x0080),      # subnormal range, IEEE rounds to min normal
    (2.0 ** -126 * (1 - 2 ** -7), BF16, 0x0000),      # largest subnormal: flushed
    (-(2.0 ** -126) * (1 - 2 ** -9), BF16, 0x8080),
    (1e39, BF16, 0x7F80),
    (65504.0, FP16, 0x7BFF),
    (65519.0, FP16, 0x7BFF),
    (65520.0, FP16, 0x7C00),                          # tie at the top: rounds to 2**16 = inf
    (-70000.0, FP16, 0xFC00),
    (2.0 ** -14 - 2.0 ** -25, FP16, 0x0400),          # IEEE: tie -> min normal
    (2.0 ** -14 - 2.0 ** -25 - 2.0 ** -40, FP16, 0x0000),
    (2.0 ** -15, FP16, 0x0000),
    (-(2.0 ** -15), FP16, 0x8000),
    (2.0 ** -126 - 2.0 ** -150, FP32, 0x00800000),
    (2.0 ** -126 - 2.0 ** -149, FP32, 0x00000000),
    (1 + 2 ** -24, FP32, 0x3F800000),
    (1 + 2 ** -24 + 2 ** -50, FP32, 0x3F800001),
    (float("nan"), FP32, F32_NAN), (float("-nan"), BF16, BF16_NAN), (float("nan"), FP16, FP16_NAN),
    (float("-inf"), FP32, 0xFF800000), (-0.0, FP32, 0x80000000),
])
def test_from_float_hand(x, fmt, code):
    assert int(from_float([x], fmt)[0]) == code


# ---- operations against hand-computed answers ----------------------------------------------

MUL_FP32 = [
    (0x3F800000, 0x3F800000, 0x3F800000),             # 1 * 1
    (0x3FC00000, 0x3FC00000, 0x40100000),             # 1.5 * 1.5 = 2.25
    (0x3F800001, 0x3F800001, 0x3F800002),             # (1+u)^2 = 1 + 2u + u^2 -> 1 + 2u
    (0x3F800001, 0x3FC00000, 0x3FC00002),             # 1.5 + 1.5u: tie -> even (up)
    (0x3F800003, 0x3FC00000, 0x3FC00004),             # 1.5 + 4.5u: tie -> even (down)
    (0x7F7FFFFF, 0x40000000, 0x7F800000),             # overflow
    (0xFF7FFFFF, 0x40000000, 0xFF800000),
    (0x00000000, 0x7F800000, F32_NAN),                # 0 * inf
    (0x00000001, 0xFF800000, F32_NAN),                # subnormal reads as 0
    (0x80000000, 0x40A00000, 0x80000000),             # -0 * 5
    (0xFFC00001, 0x3F800000, F32_NAN),
    (0x7F800000, 0xC0000000, 0xFF800000),             # inf * -2
    (0x00800000, 0x3F000000, 0x00000000),             # 2**-127 flushed
    (0x80800000, 0x3F000000, 0x80000000),
    (0x00800000, 0x3F7FFFFF, 0x00800000),             # 2**-126 (1 - 2**-24): IEEE tie -> min normal
    (0x80800000, 0x3F7FFFFF, 0x80800000),
    (0x00800000, 0x3F7FFFFE, 0x00000000),             # the largest subnormal exactly: flushed
    (0x00000001, 0x71800000, 0x00000000),             # subnormal input x 2**100: still zero
    (0x3FFFFFFF, 0x3F800001, 0x40000000),             # (2 - u)(1 + u) = 2 + u - u^2 -> 2
]


@pytest.mark.parametrize("a, b, y", MUL_FP32, ids=[f"{a:08x}x{b:08x}" for a, b, _ in MUL_FP32])
def test_fmul_fp32_hand(a, b, y):
    assert int(fmul([a], [b], FP32, FP32, FP32)[0]) == y


def test_fmul_mixed_hand():
    # (1 + 2**-7)^2 = 1 + 2**-6 + 2**-14, exact in fp32.
    assert int(fmul([0x3F81], [0x3F81], BF16, BF16, FP32)[0]) == 0x3F820200
    # ... and in bf16: 1 + 2**-6 + 2**-14 rounds to 1 + 2**-6.
    assert int(fmul([0x3F81], [0x3F81], BF16, BF16, BF16)[0]) == 0x3F82
    assert int(fmul([0x7F7F], [0x4000], BF16, BF16, FP32)[0]) == 0x7F800000   # beyond fp32
    assert int(fmul([0x0400], [0x0400], FP16, FP16, FP32)[0]) == 0x31800000   # 2**-28
    assert int(fmul([0x7BFF], [0x7BFF], FP16, FP16, FP32)[0]) == f32(65504.0 ** 2)
    assert int(fmul([0x7BFF], [0x7BFF], FP16, FP16, FP16)[0]) == 0x7C00
    assert int(fmul([0x3C00], [0x3F80], FP16, BF16, FP32)[0]) == 0x3F800000


ADD_FP32 = [
    (0x3F800000, 0x3F800000, 0x40000000),             # 1 + 1
    (0x3F800000, 0xBF800000, 0x00000000),             # x - x = +0
    (0xC0490FDB, 0x40490FDB, 0x00000000),
    (0x80000000, 0x80000000, 0x80000000),             # -0 + -0 = -0
    (0x00000000, 0x80000000, 0x00000000),             # +0 + -0 = +0
    (0x80000001, 0x80000000, 0x80000000),             # subnormal reads as -0
    (0x7F800000, 0xFF800000, F32_NAN),                # inf - inf
    (0x7F800000, 0x7F800000, 0x7F800000),
    (0xFF800000, 0x3F800000, 0xFF800000),
    (0x7FC00000, 0x7F800000, F32_NAN),
    (0x3FFFFFFF, 0x34000000, 0x40000000),             # (2 - u) + u = 2
    (0x3FFFFFFF, 0x33800000, 0x40000000),             # (2 - u) + u/2: tie -> even: 2
    (0x3F800000, 0x33800000, 0x3F800000),             # 1 + u/2: tie -> even: 1
    (0x3F800001, 0x33800000, 0x3F800002),             # (1 + u) + u/2: tie -> even: 1 + 2u
    (0x3F800000, 0x33800001, 0x3F800001),             # just above the tie
    (0x3F800000, 0x2B800000, 0x3F800000),             # 1 + 2**-40
    (0x00800001, 0x80800000, 0x00000000),             # 2**-149 flushed
    (0x80800001, 0x00800000, 0x80000000),             # -2**-149 flushed to -0
    (0x01000000, 0x80800000, 0x00800000),             # 2**-125 - 2**-126 = min normal
    (0x7F7FFFFF, 0x7F7FFFFF, 0x7F800000),             # overflow
    (0x7F7FFFFF, 0x73000000, 0x7F800000),             # max + half an ulp (2**103): tie -> inf
    (0x7F7FFFFF, 0x72800000, 0x7F7FFFFF),             # max + a quarter ulp: max
    (0x7F7FFFFF, 0x73800000, 0x7F800000),             # max + one ulp: inf
    (0x40000000, 0xBF800001, 0x3F7FFFFE),             # 2 - (1 + u) = 1 - u: normalize by 1
    (0x3F800000, 0xB3800000, 0x3F7FFFFF),             # 1 - u/2: exact, one binade down
]


@pytest.mark.parametrize("a, b, y", ADD_FP32, ids=[f"{a:08x}+{b:08x}" for a, b, _ in ADD_FP32])
def test_fadd_fp32_hand(a, b, y):
    assert int(fadd([a], [b], FP32)[0]) == y
    assert int(fadd([b], [a], FP32)[0]) == y          # commutative, signs of zeros included


def test_fadd_narrow_hand():
    assert int(fadd([0x3F80], [0x3B80], BF16)[0]) == 0x3F80   # 1 + 2**-8: tie -> 1
    assert int(fadd([0x3F81], [0x3B80], BF16)[0]) == 0x3F82   # tie -> even
    assert int(fadd([0x7BFF], [0x5000], FP16)[0]) == 0x7C00   # 65504 + 32: tie -> inf
    assert int(fadd([0x7BFF], [0x4BFF], FP16)[0]) == 0x7BFF   # 65504 + 15.99: 65504
    assert int(fadd([0x0401], [0x8400], FP16)[0]) == 0x0000   # 2**-24 flushed


def test_fmac_rounds_twice():
    # bf16 (1 + 2**-7)^2 = 1 + 2**-6 + 2**-14 exact in fp32; + (-1) = 2**-6 + 2**-14.
    assert int(fmac([0x3F81], [0x3F81], [0xBF800000], BF16, FP32)[0]) == 0x3C808000
    # In bf16 the product first rounds to 1 + 2**-6, so the sum is 2**-6 (not fused).
    assert int(fmac([0x3F81], [0x3F81], [0xBF80], BF16, BF16)[0]) == 0x3C80


@pytest.mark.parametrize("x, y", [
    (0x3F808000, 0x3F80), (0x3F818000, 0x3F82), (0x3F808001, 0x3F81), (0x3F7FFFFF, 0x3F80),
    (0x7F7FFFFF, 0x7F80), (0xFF7F8000, 0xFF80), (0x7F7F7FFF, 0x7F7F), (0x3FFFFFFF, 0x4000),
    (0x00800000, 0x0080), (0x007FFFFF, 0x0000), (0x80000001, 0x8000), (0xFFC00001, BF16_NAN),
    (0xFF800000, 0xFF80),
])
def test_fconvert_fp32_bf16_hand(x, y):
    assert int(fconvert([x], FP32, BF16)[0]) == y


@pytest.mark.parametrize("x, y", [
    (0x477FE000, 0x7BFF), (0x477FEFFF, 0x7BFF), (0x477FF000, 0x7C00), (0xC77FF000, 0xFC00),
    (0x38800000, 0x0400), (0x387FF000, 0x0400), (0x387FE000, 0x0400), (0x387FDFFF, 0x0000),
    (0xB8000000, 0x8000), (0x3F801000, 0x3C00), (0x3F803000, 0x3C02), (0x7FC00000, FP16_NAN),
])
def test_fconvert_fp32_fp16_hand(x, y):
    assert int(fconvert([x], FP32, FP16)[0]) == y


@pytest.mark.parametrize("bits, x, fmt, y", [
    (32, 0, FP32, 0x00000000), (32, 1, FP32, 0x3F800000), (32, -1, FP32, 0xBF800000),
    (32, (1 << 24) + 1, FP32, 0x4B800000), (32, (1 << 24) + 3, FP32, 0x4B800002),
    (32, -(1 << 31), FP32, 0xCF000000), (32, (1 << 31) - 1, FP32, 0x4F000000),
    (32, 65519, FP16, 0x7BFF), (32, 65520, FP16, 0x7C00), (32, -(1 << 31), FP16, 0xFC00),
    (16, -32768, BF16, 0xC700), (16, 257, BF16, 0x4380), (16, 259, BF16, 0x4382),
    (8, -128, FP16, 0xD800), (8, 0xFF, FP32, 0xBF800000),
])
def test_int_to_float_hand(bits, x, fmt, y):
    assert int(int_to_float([x], bits, fmt)[0]) == y


def test_fdot_hand_and_order():
    one = 0x3F80
    assert int(fdot([[0x3F80, 0x4000, 0x4040, 0x4080]], [[one] * 4], BF16)[0]) == 0x41200000
    # [1, 1, 2**24, 0]: pairwise (1 + 1) + (2**24 + 0) = 2**24 + 2 exactly; pairing lanes (0, 2)
    # first would lose both ones to ties-to-even.
    assert int(fdot([[one, one, 0x4B80, 0]], [[one] * 4], BF16)[0]) == 0x4B800001
    assert int(fdot([[0x7F80, 0xFF80]], [[one, one]], BF16)[0]) == F32_NAN
    assert int(fdot([[0x4000]], [[0x4040]], BF16)[0]) == 0x40C00000       # one lane: 2 * 3


# ---- a million random pairs against NumPy's own arithmetic ---------------------------------

def _numpy_ftz(op, a, b, fmt, dtype):
    x = ftz(a, fmt).view(dtype)
    y = ftz(b, fmt).view(dtype)
    with np.errstate(all="ignore"):
        z = op(x, y).astype(dtype)
    return canonical(ftz(z.view(a.dtype), fmt), fmt)


def _million(fmt, add):
    rng = np.random.default_rng(SEED)
    a, b = operand_pairs(rng, fmt, fmt, 1_000_000, add=add)
    return a, b


@pytest.mark.parametrize("fmt, dtype", [(FP32, np.float32), (FP16, np.float16),
                                        (BF16, ml_dtypes.bfloat16)], ids=["fp32", "fp16", "bf16"])
def test_fmul_matches_numpy_ftz(fmt, dtype):
    a, b = _million(fmt, add=False)
    got = fmul(a, b, fmt, fmt, fmt)
    want = _numpy_ftz(np.multiply, a, b, fmt, dtype)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), f"{len(bad)} mismatches, first a={a[bad[0]]:#x} b={b[bad[0]]:#x}"


@pytest.mark.parametrize("fmt, dtype", [(FP32, np.float32), (FP16, np.float16),
                                        (BF16, ml_dtypes.bfloat16)], ids=["fp32", "fp16", "bf16"])
def test_fadd_matches_numpy_ftz(fmt, dtype):
    a, b = _million(fmt, add=True)
    got = fadd(a, b, fmt)
    want = _numpy_ftz(np.add, a, b, fmt, dtype)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), f"{len(bad)} mismatches, first a={a[bad[0]]:#x} b={b[bad[0]]:#x}"


def test_fconvert_matches_numpy_ftz():
    rng = np.random.default_rng(SEED)
    x = random_codes(rng, FP32, 1_000_000, exp_spread=40)
    with np.errstate(all="ignore"):
        want16 = canonical(ftz(ftz(x, FP32).view(np.float32).astype(np.float16).view(np.uint16),
                               FP16), FP16)
        want_bf = canonical(ftz(ftz(x, FP32).view(np.float32).astype(ml_dtypes.bfloat16)
                                .view(np.uint16), BF16), BF16)
    assert (fconvert(x, FP32, FP16) == want16).all()
    assert (fconvert(x, FP32, BF16) == want_bf).all()


# ---- the float64 reference: error bounds and exactness ---------------------------------------

@pytest.mark.parametrize("fmt", [FP32, FP16, BF16], ids=str)
def test_half_ulp_bound_against_float64(fmt):
    """Every result of an exact value in the normal range is within half an ulp (relative
    ``2**-precision``) of it; an exact value just below the smallest normal that the underflow rule
    rounds up to it is within ``2**-precision / (1 - 2**-precision)``; the rest flush to zero."""
    rng = np.random.default_rng(SEED + 1)
    a, b = operand_pairs(rng, fmt, fmt, 200_000, add=True)
    x, y = to_float(a, fmt), to_float(b, fmt)
    with np.errstate(invalid="ignore"):
        cases = ((fadd(a, b, fmt), x + y), (fmul(a, b, fmt, fmt, fmt), x * y))
    for got, exact in cases:
        value = to_float(got, fmt)
        with np.errstate(invalid="ignore"):
            finite = np.isfinite(value) & (np.abs(exact) >= 2.0 ** fmt.emin)
            rel = np.abs(value[finite] - exact[finite]) / np.abs(exact[finite])
            assert rel.max() <= 2.0 ** -fmt.precision
            assert finite.sum() > 100_000
            tiny = (np.abs(exact) < 2.0 ** fmt.emin) & (exact != 0)
            up = tiny & (value != 0)
            assert (np.abs(value[up]) == 2.0 ** fmt.emin).all()
            assert (np.abs(exact[up]) >= 2.0 ** fmt.emin * (1 - 2.0 ** -fmt.precision)).all()
            assert ((np.abs(exact[tiny & (value == 0)])) <
                    2.0 ** fmt.emin * (1 - 2.0 ** -fmt.precision)).all()


@pytest.mark.parametrize("fmt", [FP16, BF16], ids=str)
def test_products_into_fp32_are_exact(fmt):
    """bf16 x bf16 and fp16 x fp16 into fp32 equal the exact (float64) product; fp16 always,
    bf16 whenever the product is inside the normal fp32 range."""
    rng = np.random.default_rng(SEED + 2)
    a = rng.integers(0, 1 << 16, 1_000_000).astype(np.uint16)
    b = rng.integers(0, 1 << 16, 1_000_000).astype(np.uint16)
    with np.errstate(invalid="ignore"):
        exact = to_float(a, fmt) * to_float(b, fmt)
    got = to_float(fmul(a, b, fmt, fmt, FP32), FP32)
    finite = np.isfinite(exact)
    in_range = finite & ((np.abs(exact) >= 2.0 ** -126) & (np.abs(exact) < 2.0 ** 128)
                         | (exact == 0))
    assert (got[in_range] == exact[in_range]).all()
    if fmt == FP16:
        assert (in_range == finite).all()        # every finite fp16 product is a normal fp32
    else:
        assert (~in_range & finite).sum() > 0    # bf16 can leave the range (and flushes)


def test_corner_codes_cover_classes():
    codes = np.array(corner_codes(FP32), dtype=np.uint32)
    values = to_float(codes, FP32)
    assert np.isnan(values).sum() >= 3 and np.isinf(values).sum() == 2
    assert ((values == 0) & np.signbit(values)).any() and ((codes & 0x7F800000) == 0).sum() >= 6


def test_a_format_name_instead_of_a_format_says_what_is_wanted():
    from hdl.arith.format import FloatFormat
    with pytest.raises(TypeError, match=r"golden float models take a FloatFormat \(BF16, FP16, "
                                        r"FP32 from hdl.arith.format\), not the str 'bf16'"):
        to_float(0, "bf16")
    with pytest.raises(ValueError, match="golden float models cover bf16, fp16, fp32, not the "
                                         "format fp8"):
        to_float(0, FloatFormat("fp8", 4, 3))
