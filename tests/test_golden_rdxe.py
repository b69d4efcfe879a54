"""Tests of golden.rdxe: hand-computed cases first, then the model as an oracle (storage layouts,
GQA, fused against sequential, accuracy bounds against float64), then the cycle formulas against
an independent schedule, then pinned parameter and argument errors.

Expected values are computed by hand (comments show the arithmetic) or by code written here
independently of the module (layout loops, the Fraction-based requantizer reference, per-chunk
schedules).
"""

import math
from dataclasses import fields

import numpy as np
import pytest

import golden.rdxe as R
from golden.arith.float import from_float, to_float
from golden.arith.func import rsqrt
from golden.arith.requant import reference as requant_reference
from golden.rdxe.model import _activation_quantize
from hdl.arith.format import FP32

DEFAULT = R.DxtConfig()
SMALL = R.DxtConfig(lanes=4, vacs=4, wmem_depth=64, kv_rows=16, head_dim=8)
BIG_WMEM = R.DxtConfig(wmem_depth=1 << 16)
#: A tile whose head dimension is not a multiple of its VAC count (VACs 0-3 own 3 value
#: channels, 4-7 own 2) and whose key takes 5 rows.
UNEVEN = R.DxtConfig(lanes=4, vacs=8, head_dim=20, kv_rows=64)
#: One VAC's parameters, for a GEMV on a ring of a few VACs (not a tile).
VAC_SMALL = R.VacConfig(lanes=4, wmem_depth=64)
ONE = 0x3F800000


def f32(value) -> np.uint32:
    """fp32 code of a value fp32 holds exactly (checked)."""
    code = np.uint32(from_float(value, FP32))
    assert float(to_float(code, FP32)) == value
    return code


def rc(m, shift) -> R.RCFactor:
    return R.RCFactor(np.asarray(m, np.int64), np.asarray(shift, np.int64))


# --- parameters ---------------------------------------------------------------------------------


def test_default_parameters_and_derived_sizes():
    p = DEFAULT
    assert (p.lanes, p.vacs, p.head_dim, p.rc_bits) == (16, 16, 64, 25)
    assert p.rc_mant_bits == 19                 # 19-bit significand + 6-bit shift = 25 bits
    assert p.key_rows == 4                      # a 64-byte key is 4 rows of 16 bytes
    assert p.value_rows == 4                    # 64 channels over 16 VACs
    assert p.half_rows == 256
    assert p.out_limits == (-127, 127)
    assert R.DxtConfig(clamp="full").out_limits == (-128, 127)
    # 256 K rows / 4 rows per key = 64 slots x 16 VACs; 256 V rows / 4 channels = 64 blocks x 16.
    assert R.kv_capacity(p) == 1024
    # Baseline: K 256 // 64 = 4 blocks of 16 slots x 16 VACs = 1024; V one row per token: 256.
    assert R.kv_capacity(p, "baseline") == 256
    # SMALL: 8 K rows / 2 rows per key = 4 slots x 4 VACs; 8 V rows / 2 channels = 4 blocks x 4.
    # Baseline: K 8 // 8 = 1 block of 4 slots x 4 VACs = 16; V one row per token: 8.
    assert R.kv_capacity(SMALL) == 16 and R.kv_capacity(SMALL, "baseline") == 8


@pytest.mark.parametrize("kwargs, error, message", [
    ({"lanes": 12}, ValueError, "Lane count must be a power of two between 4 and 64, not 12"),
    ({"lanes": 16.0}, TypeError, "Lane count must be an integer power of two between 4 and 64, "
                                 "not 16.0"),
    ({"lanes": 2}, ValueError, "Lane count must be a power of two between 4 and 64, not 2"),
    ({"vacs": 0}, ValueError, "VAC count must be a power of two between 4 and 64, not 0"),
    ({"vacs": 5}, ValueError, "VAC count must be a power of two between 4 and 64, not 5"),
    ({"wmem_depth": 0}, ValueError, "WMEM depth must be between 1 and 1048576, not 0"),
    ({"kv_rows": 384}, ValueError, "KV-cache row count must be a power of two between 2 and "
                                   "1048576, not 384"),
    ({"kv_rows": 0}, ValueError, "KV-cache row count must be a power of two between 2 and "
                                 "1048576, not 0"),
    ({"head_dim": 40}, ValueError, "Head dimension must be a multiple of the lane count 16, "
                                   "not 40"),
    ({"head_dim": 8}, ValueError, "Head dimension must be between 16 and 1024, not 8"),
    ({"group_size": 0}, ValueError, "GQA group size must be between 1 and 64, not 0"),
    ({"mult_bits": 40}, ValueError, "PPU multiplier width must be between 2 and 32, not 40"),
    ({"clamp": "wide"}, ValueError, "Clamp must be 'symmetric' or 'full', not 'wide'"),
    ({"rc_bits": 12}, ValueError, "RC factor width must be between 16 and 30, not 12"),
    ({"norm_frac": 8}, ValueError, "RMSNorm fraction bits must be between 0 and 7, not 8"),
    ({"prob_frac": -1}, ValueError, "Probability fraction bits must be between 0 and 7, not -1"),
    ({"kv_rows": 4}, ValueError, r"KV-cache row count must be at least 8 to hold one token \(4 "
                                 r"key rows and 4 value rows per half\), not 4"),
])
def test_parameter_messages(kwargs, error, message):
    """The tile's parameters (``hdl.rdxe.DxtConfig``, which the models take) are checked once,
    on construction."""
    with pytest.raises(error, match=f"^{message}$"):
        R.DxtConfig(**kwargs)


# --- hand-computed: RC factor, RCU, PPU, activation quantizer -----------------------------------


@pytest.mark.parametrize("value, frac, m, shift", [
    (1.0, 4, 1 << 18, 14),                        # 2**18 * 2**-14 = 16 = 1.0 * 2**4
    (0.75, 4, 3 << 17, 15),                       # 393216 / 32768 = 12 = 0.75 * 16
    (0.125, 4, 1 << 18, 17),                      # a power of two: 2**18 / 2**17 = 2
    (2.0 ** -7, 7, 1 << 18, 18),                  # 1/128 * 2**7 = 1: R = 1
    (1 + 2.0 ** -23, 0, 1 << 18, 18),             # 2**18 + 1/32 rounds down
    (1 + 16 * 2.0 ** -23, 0, 1 << 18, 18),        # 2**18 + 1/2: tie to even (down)
    (1 + 48 * 2.0 ** -23, 0, (1 << 18) + 2, 18),  # 2**18 + 3/2: tie to even (up)
    (2 - 2.0 ** -23, 4, 1 << 18, 13),             # rounds to 2**19: renormalized, exponent + 1
    (2.0 ** -49, 4, 1 << 18, 63),                 # shift 18 + 49 - 4 = 63: the last one kept
    (2.0 ** -50, 4, 0, 63),                       # shift 64: flushed
    (2.0 ** 14, 4, 1 << 18, 0),                   # shift 18 - 14 - 4 = 0: the largest kept
    (2.0 ** 15, 4, (1 << 19) - 1, 0),             # shift -1: saturated
    (0.0, 4, 0, 63),
    (math.inf, 4, (1 << 19) - 1, 0),
])
def test_to_rc_by_hand(value, frac, m, shift):
    code = np.uint32(FP32.infinity()) if math.isinf(value) else f32(value)
    got = R.to_rc(code, frac, DEFAULT)
    assert (int(got.m), int(got.shift)) == (m, shift)


def test_to_rc_smaller_significand_and_errors():
    # rc_bits 16: a 10-bit significand; 1.5 -> 768 = 1.5 * 2**9, shift 9 - 0 - 0 = 9.
    got = R.to_rc(f32(1.5), 0, R.VacConfig(rc_bits=16))
    assert (int(got.m), int(got.shift)) == (768, 9)
    with pytest.raises(ValueError, match="^RC factor must be a non-negative fp32 value, not "
                                         "-1.0$"):
        R.to_rc(f32(-1.0), 4, DEFAULT)
    with pytest.raises(ValueError, match="^RC factor must be a non-negative fp32 value, not nan$"):
        R.to_rc(np.uint32(FP32.canonical_nan), 4, DEFAULT)


def test_rcu_by_hand():
    assert R.rcu(1000, rc(1 << 18, 14)).tolist() == 16000          # 1000 * 16
    assert R.rcu(3, rc(3 << 17, 15)).tolist() == 36                 # 3 * 12
    assert R.rcu(1, rc(3 << 17, 20)).tolist() == 0                  # 0.375 -> 0
    assert R.rcu(3, rc(3 << 17, 20)).tolist() == 1                  # 1.125 -> 1
    assert R.rcu(-1, rc(1 << 18, 19)).tolist() == 0                 # -0.5 -> 0 (even)
    assert R.rcu(-3, rc(1 << 18, 19)).tolist() == -2                # -1.5 -> -2 (even)
    assert R.rcu(1 << 30, rc((1 << 19) - 1, 0)).tolist() == (1 << 31) - 1     # saturates
    assert R.rcu(-(1 << 31), rc(0, 63)).tolist() == 0               # flushed factor


def test_ppu_by_hand():
    assert R.ppu([5, 7, -5, 200, -200], 1, 1, DEFAULT).tolist() == [2, 4, -2, 100, -100]
    assert R.ppu([300, -300], 1, 0, DEFAULT).tolist() == [127, -127]
    assert R.ppu([300, -300], 1, 0, R.VacConfig(clamp="full")).tolist() == [127, -128]


@pytest.mark.parametrize("e, p", [
    (1.0, 127), (0.5, 64),             # 63.5: tie to even
    (0.25, 32),                        # 31.75
    (0.75, 95),                        # 95.25 (a scale of 128 would give 96)
    (2.0 ** -7, 1),                    # 0.99
    (2.0 ** -8, 0),                    # 0.496
    (3 * 2.0 ** -9, 1),                # 0.744
    (2.0 ** -60, 0), (0.0, 0),         # shift capped at 63: still 0
])
def test_activation_quantizer_by_hand(e, p):
    assert _activation_quantize(f32(e)).tolist() == p


# --- hand-computed: GEMV and WMEM ---------------------------------------------------------------


def test_gemv_by_hand():
    W = np.array([[1, 2], [-3, 4]])
    x = np.array([5, -6])
    assert R.accumulate(W, x).tolist() == [-7, -39]
    assert R.gemv(W, x, 1, 0, DEFAULT).tolist() == [-7, -39]
    # * 3 / 4: -5.25 -> -5, -29.25 -> -29; per-output multipliers and shifts.
    assert R.gemv(W, x, 3, 2, DEFAULT).tolist() == [-5, -29]
    assert R.gemv(W, x, [1, 1], [0, 1], DEFAULT).tolist() == [-7, -20]   # -19.5 -> -20
    big = np.full((2, 4), 127)
    big[1] = -128
    ones = np.full(4, 127)
    assert R.gemv(big, ones, 1, 0, DEFAULT).tolist() == [127, -127]
    assert R.gemv(big, ones, 1, 0, R.DxtConfig(clamp="full")).tolist() == [127, -128]


def test_gemv_matches_exact_rational_requantization():
    rng = np.random.default_rng(1)
    W = rng.integers(-128, 128, (40, 300))
    x = rng.integers(-128, 128, 300)
    m = rng.integers(-(1 << 31), 1 << 31, 40)
    shift = rng.integers(20, 40, 40)
    got = R.gemv(W, x, m, shift, DEFAULT)
    acc = [sum(int(a) * int(b) for a, b in zip(row, x)) for row in W]
    want = [requant_reference(a, int(mm), int(s), clamp="symmetric")
            for a, mm, s in zip(acc, m, shift)]
    assert got.tolist() == want
    ref = np.clip(R.gemv_reference(W, x, m, shift), -127, 127)
    assert np.abs(got - ref).max() <= 0.5 + 1e-9


def test_wmem_image_by_hand():
    W = np.arange(18).reshape(3, 6) - 9                 # 3 outputs x 6 inputs, lanes 4, 2 VACs
    image = R.wmem_image(W, VAC_SMALL, vacs=2)          # a ring of 2 VACs
    assert image.shape == (2, 64, 4) and image.dtype == np.int8
    # VAC 0: outputs 0 (pass 0, rows 0-1) and 2 (pass 1, rows 2-3); VAC 1: output 1 (rows 0-1).
    assert image[0, 0].tolist() == [-9, -8, -7, -6]
    assert image[0, 1].tolist() == [-5, -4, 0, 0]       # inputs 4, 5, zero padding
    assert image[0, 2].tolist() == [3, 4, 5, 6]
    assert image[0, 3].tolist() == [7, 8, 0, 0]
    assert image[1, 0].tolist() == [-3, -2, -1, 0]
    assert image[1, 1].tolist() == [1, 2, 0, 0]
    assert not image[1, 2:].any() and not image[0, 4:].any()
    # A tile's VACs are a ring of its VAC count.
    assert np.array_equal(R.wmem_image(W, SMALL), R.wmem_image(W, VAC_SMALL, vacs=4))


def test_wmem_overflow_message():
    message = r"^GEMV needs 66 WMEM rows per VAC \(33 outputs x 2 chunks\), more than the WMEM " \
              r"depth 64$"
    with pytest.raises(ValueError, match=message):
        R.gemv(np.zeros((129, 8), int), np.zeros(8, int), 1, 0, SMALL)
    with pytest.raises(ValueError, match=message):
        R.wmem_image(np.zeros((65, 8), int), VAC_SMALL, vacs=2)


# --- hand-computed: RMSNorm ---------------------------------------------------------------------


def test_rms_rc_exact_power_of_two():
    x = np.array([8, -8] * 8)                           # K = 16, S = 1024, mean 64
    S, variance, r, factor = R.rms_rc(x, 0, DEFAULT)
    assert S == 1024
    assert int(variance) == int(f32(64.0))              # 1024 * fp32(1/16) + 0, exact
    assert int(r) == int(f32(0.125))                    # rsqrt(64) = 1/8 exactly
    assert (int(factor.m), int(factor.shift)) == (1 << 18, 17)      # R = 1/8 * 2**4 = 2


def test_rmsnorm_equal_modes_when_the_factor_times_two_to_f_is_an_integer():
    x = np.array([8, -8] * 8)
    rng = np.random.default_rng(2)
    W = rng.integers(-127, 128, (20, 16))
    acc = W @ x
    for eps in (0, int(f32(2.0 ** -30))):               # 64 + 2**-30 rounds to 64 in fp32
        fused = R.rmsnorm_gemv_trace(W, x, 1, 3, eps, DEFAULT)
        seq = R.rmsnorm_gemv_trace(W, x, 1, 3, eps, DEFAULT, mode="sequential")
        assert fused.rcu.tolist() == (2 * acc).tolist()             # exact RCU: R = 2
        assert seq.x_norm.tolist() == (2 * x).tolist()              # +-16, exact
        assert seq.acc.tolist() == (2 * acc).tolist()
        want = [requant_reference(2 * a, 1, 3) for a in acc]
        assert fused.out.tolist() == seq.out.tolist() == want


def test_rmsnorm_by_hand_and_the_modes_differ():
    # x = [3, 4]: mean 12.5, rc = 1/sqrt(12.5) = 0.28284, R = 16 rc = 4.5255.
    x = np.array([3, 4])
    trace = R.rmsnorm_gemv_trace(np.array([[1, 1], [1, -1]]), x, 1, 0, 0, DEFAULT)
    assert trace.sum_sq == 25 and int(trace.variance) == int(f32(12.5))
    assert abs(float(to_float(trace.rsqrt, FP32)) * math.sqrt(12.5) - 1) < 2 ** -23.9
    assert abs(trace.rc.value / (16 / math.sqrt(12.5)) - 1) < 2 ** -18
    assert trace.acc.tolist() == [7, -1]
    assert trace.rcu.tolist() == [32, -5]               # 31.68 -> 32, -4.53 -> -5
    seq = R.rmsnorm_gemv_trace(np.array([[1, 1], [1, -1]]), x, 1, 0, 0, DEFAULT,
                               mode="sequential")
    assert seq.x_norm.tolist() == [14, 18]              # 13.58 -> 14, 18.10 -> 18
    assert seq.out.tolist() == [32, -4]                 # differs from fused -5 in output 1


def test_rmsnorm_eps_by_hand():
    W = np.array([[1, 0, 0, 0]])
    x = np.array([1, 0, 0, 0])                          # mean 1/4
    # eps 0: rc = 2, R = 32; eps 3/4: v = 1, rc = 1, R = 16.
    assert R.rmsnorm_gemv(W, x, 1, 0, 0, DEFAULT).tolist() == [32]
    assert R.rmsnorm_gemv(W, x, 1, 0, int(f32(0.75)), DEFAULT).tolist() == [16]
    seq = R.rmsnorm_gemv_trace(W, x, 1, 0, int(f32(0.75)), DEFAULT, mode="sequential")
    assert seq.x_norm.tolist() == [16, 0, 0, 0]
    assert R.eps_code(1e-5, 2.0 ** -4) == from_float(1e-5 * 256, FP32)


def test_rmsnorm_all_zero_input():
    W = np.full((3, 32), 100)
    x = np.zeros(32, int)
    for eps in (0, int(f32(2.0 ** -20))):
        for mode in R.MODES:
            trace = R.rmsnorm_gemv_trace(W, x, 1 << 30, 20, eps, DEFAULT, mode=mode)
            assert trace.out.tolist() == [0, 0, 0]
    # eps = 0: rsqrt(+0) = +inf, the factor saturates; eps = 2**-20: rc = 2**10, R = 2**14.
    assert R.rms_rc(x, 0, DEFAULT)[3].m.tolist() == (1 << 19) - 1
    factor = R.rms_rc(x, int(f32(2.0 ** -20)), DEFAULT)[3]
    assert (int(factor.m), int(factor.shift)) == (1 << 18, 4)


# --- hand-computed: softmax ---------------------------------------------------------------------


def test_softmax_activations_by_hand():
    # Scale 1/4 in log2 units: s - max = [0, 0, -4] -> [0, 0, -1] -> exp2 = [1, 1, 1/2]
    # (exp2 of integers is exact) -> p = [127, 127, 63.5 -> 64].
    mx, exps, p = R.softmax_activations([10, 10, 6], f32(0.25))
    assert int(mx) == 10
    assert exps.tolist() == [ONE, ONE, int(f32(0.5))]
    assert p.tolist() == [127, 127, 64]
    # Scale 1: s - max = -8 -> 2**-8 -> 0.496 -> 0; per head (rows).
    _, _, p = R.softmax_activations([[0, -8, 127], [5, 5, 5]], f32(1.0))
    assert p.tolist() == [[0, 0, 127], [127, 127, 127]]


def test_softmax_pv_by_hand_and_the_modes_differ():
    # p = [127, 127, 64], sum 318, R = 128/318 = 0.40252; V = [2, 4, -6]:
    # acc = 254 + 508 - 384 = 378, RCU 378 * 0.40252 = 152.15 -> 152, PPU / 2 -> 76.
    # The exact softmax [0.4, 0.4, 0.2] gives 1.2 * 128 / 2 = 76.8: p_2 = 64 (not 63.5) costs it.
    s, V = [10, 10, 6], np.array([[2], [4], [-6]])
    fused = R.softmax_pv_trace(s, V, f32(0.25), 1, 1, DEFAULT)
    assert fused.p_sum.tolist() == 318 and fused.acc.tolist() == [378]
    assert fused.rcu.tolist() == [152] and fused.out.tolist() == [76]
    ref = R.softmax_pv_reference(s, V, f32(0.25), 1, 1, 7)
    assert ref.tolist() == pytest.approx([76.8])
    # Sequential: probs 127 * 0.40252 = 51.12 -> 51, 64 * 0.40252 = 25.76 -> 26;
    # 51 * 2 + 51 * 4 - 26 * 6 = 150 -> 75.
    seq = R.softmax_pv_trace(s, V, f32(0.25), 1, 1, DEFAULT, mode="sequential")
    assert seq.probs.tolist() == [51, 51, 26] and seq.acc.tolist() == [150]
    assert seq.out.tolist() == [75]


def test_softmax_single_token_and_probability_one():
    # p = [127], R = 128/127: fused RCU 127 V * 128/127 = 128 V exactly -> PPU / 128 -> V.
    V = np.array([[10, -20, 127, -127]])
    m, shift = 1 << 30, 37
    assert R.softmax_pv([5], V, f32(0.125), m, shift, DEFAULT).tolist() == [10, -20, 127, -127]
    # Sequential: 127 * 128/127 = 128 > 127: the probability 1.0 saturates to 127/128, so
    # V * 127/128: 9.92 -> 10, -19.84 -> -20, 126.008 -> 126, -126.008 -> -126.
    seq = R.softmax_pv_trace([5], V, f32(0.125), m, shift, DEFAULT, mode="sequential")
    assert seq.probs.tolist() == [127]
    assert seq.out.tolist() == [10, -20, 126, -126]


def test_softmax_equal_scores_give_the_mean():
    V = np.array([[1, 8, -3], [2, 8, -3], [3, 8, 1], [6, 8, 1]])
    fused = R.softmax_pv_trace([3] * 4, V, f32(0.375), 1 << 30, 37, DEFAULT)
    assert fused.p.tolist() == [127] * 4 and fused.p_sum.tolist() == 508
    # RCU: sums [12, 32, -4] * 127 * 128 / 508 = [384, 1024, -128] (the factor's rounding,
    # 2**-19 relative, moves none of them past a half); PPU / 128: the means [3, 8, -1].
    assert fused.acc.tolist() == [1524, 4064, -508]
    assert fused.rcu.tolist() == [384, 1024, -128]
    assert fused.out.tolist() == [3, 8, -1]


def test_softmax_modes_equal_when_the_sum_is_128():
    # p = [127, 1] (the second score 7 steps of 1 below: 2**-7 * 127 = 0.99 -> 1): sum 128,
    # reciprocal(128) = 2**-7 exactly, R = 1: probs = p and the RCU is exact.
    s = [0, -7]
    assert R.softmax_activations(s, f32(1.0))[2].tolist() == [127, 1]
    rng = np.random.default_rng(3)
    V = rng.integers(-127, 128, (2, 16))
    fused = R.softmax_pv_trace(s, V, f32(1.0), 1 << 30, 37, DEFAULT)
    seq = R.softmax_pv_trace(s, V, f32(1.0), 1 << 30, 37, DEFAULT, mode="sequential")
    assert seq.probs.tolist() == [127, 1]
    assert fused.rcu.tolist() == seq.acc.tolist() == (127 * V[0] + V[1]).tolist()
    assert fused.out.tolist() == seq.out.tolist()


def test_softmax_dominant_score():
    # Scale 1: every other score is >= 130 steps below -> exp2 flushes or p rounds to 0.
    s = np.r_[100, np.full(50, -128)]
    V = np.arange(51 * 4).reshape(51, 4) % 200 - 100
    trace = R.softmax_pv_trace(s, V, f32(1.0), 1 << 30, 37, DEFAULT)
    assert trace.p.tolist() == [127] + [0] * 50
    assert trace.out.tolist() == V[0].tolist()


# --- KV cache layouts ---------------------------------------------------------------------------


def small_kv(tokens, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (tokens, 8)), rng.integers(-128, 128, (tokens, 8))


def test_iwur_image_by_hand():
    # lanes 4, 4 VACs, d = 8, 16 rows (K rows 0-7, V rows 8-15).
    K, V = small_kv(16)
    image = R.kv_image(K, V, SMALL)
    want = np.zeros((4, 16, 4), int)
    for t in range(16):
        vac, slot = t % 4, t // 4
        want[vac, 2 * slot] = K[t, 0:4]            # one key per 2 rows, chunk by chunk
        want[vac, 2 * slot + 1] = K[t, 4:8]
        for e in range(8):                         # channel e stays in VAC e % 4
            want[e % 4, 8 + (t // 4) * 2 + e // 4, t % 4] = V[t, e]
    assert np.array_equal(image.data, want)
    assert image.written.all() and image.tokens == 16 and image.responses.all()


def test_baseline_image_by_hand():
    K, V = small_kv(8, seed=1)
    image = R.kv_image(K, V, SMALL, "baseline")
    want = np.zeros((4, 16, 4), int)
    for t in range(8):
        vac, slot = t % 4, t // 4
        for i in range(8):                         # K column-wise: row = channel of 4 slots
            want[vac, (slot // 4) * 8 + i, slot % 4] = K[t, i]
        for e in range(8):                         # V row-wise: row = token, column = channel
            want[e % 4, 8 + t, e // 4] = V[t, e]
    assert np.array_equal(image.data, want)


@pytest.mark.parametrize("layout", R.LAYOUTS)
def test_overflow_is_reported_and_harmless(layout):
    cap = R.kv_capacity(SMALL, layout)
    K, V = small_kv(cap + 3, seed=2)
    full = R.kv_image(K[:cap], V[:cap], SMALL, layout)
    over = R.kv_image(K, V, SMALL, layout)
    assert over.responses.tolist() == [True] * cap + [False] * 3
    assert over.tokens == cap
    assert np.array_equal(over.data, full.data) and np.array_equal(over.written, full.written)
    part = R.kv_image(K[:5], V[:5], SMALL, layout)
    assert part.written.sum() == 5 * 8 * 2         # exactly the bytes of 5 tokens
    # A cache too small for the baseline's column-wise keys: every write is refused.
    tiny = R.DxtConfig(lanes=4, vacs=4, kv_rows=8, head_dim=8)
    assert R.kv_capacity(tiny, "baseline") == 0 and R.kv_capacity(tiny) == 8
    none = R.kv_image(K[:2], V[:2], tiny, "baseline")
    assert not none.responses.any() and not none.written.any()


@pytest.mark.parametrize("layout", R.LAYOUTS)
@pytest.mark.parametrize("params", [SMALL, DEFAULT, UNEVEN])
def test_kv_layout_is_a_bijection(layout, params):
    tokens = min(R.kv_capacity(params, layout), 200)
    rng = np.random.default_rng(4)
    K = rng.integers(-128, 128, (tokens, params.head_dim))
    V = rng.integers(-128, 128, (tokens, params.head_dim))
    image = R.kv_image(K, V, params, layout)
    assert image.written.sum() == 2 * tokens * params.head_dim     # no byte written twice
    K2, V2 = R.kv_read(image, params)
    assert np.array_equal(K2, K) and np.array_equal(V2, V)


def test_iwur_rows_are_operand_chunks():
    """Uniform reads: every K row is one chunk of one key; every V row is lanes consecutive
    tokens of one channel (what the MAC consumes per cycle)."""
    p = DEFAULT
    rng = np.random.default_rng(5)
    T = 100
    K, V = rng.integers(-128, 128, (T, 64)), rng.integers(-128, 128, (T, 64))
    data = R.kv_image(K, V, p).data
    for t in range(T):
        for b in range(4):
            assert data[t % 16, (t // 16) * 4 + b].tolist() == K[t, 16 * b:16 * b + 16].tolist()
    for e in range(64):
        for B in range(-(-T // 16)):
            row = data[e % 16, 256 + B * 4 + e // 16]
            chunk = V[16 * B:16 * B + 16, e]
            assert row[:len(chunk)].tolist() == chunk.tolist()


def count_reads(tokens, op, params, layout):
    """Independent read count: for each VAC, the distinct rows holding the operands of its
    outputs (each read once; for iWuR also once per chunk: a row is one chunk)."""
    N, L, d = params.vacs, params.lanes, params.head_dim
    rows = [set() for _ in range(N)]
    chunks = [0] * N
    if op == "qk":                                      # output t: key t, chunks of channels
        for t in range(tokens):
            for j in range(0, d, L):
                ch = np.arange(j, j + L)
                vac, row, _ = R.kv_address("k", t, ch, params, layout)
                rows[t % N] |= set(row.tolist())
                chunks[t % N] += len(set(row.tolist()))
    else:                                               # output e: channel e, chunks of tokens
        for e in range(d):
            for j in range(0, tokens, L):
                t = np.arange(j, min(j + L, tokens))
                vac, row, _ = R.kv_address("v", t, e, params, layout)
                rows[e % N] |= set(row.tolist())
                chunks[e % N] += len(set(row.tolist()))
    if layout == "iwur":
        assert chunks == [len(r) for r in rows]
    return np.array([len(r) for r in rows])


@pytest.mark.parametrize("tokens", [1, 15, 16, 17, 100])
@pytest.mark.parametrize("op", ["qk", "pv"])
def test_read_cycles_formula_matches_count(tokens, op):
    for layout in R.LAYOUTS:
        got = R.kv_read_cycles(tokens, op, DEFAULT, layout)
        assert got.reads.tolist() == count_reads(tokens, op, DEFAULT, layout).tolist()
    iwur = R.kv_read_cycles(tokens, op, DEFAULT)
    base = R.kv_read_cycles(tokens, op, DEFAULT, "baseline")
    useful = tokens * 64
    assert iwur.utilization == pytest.approx(useful / (16 * 16 * iwur.cycles))
    assert base.utilization == pytest.approx(useful / (16 * 16 * base.cycles))


def test_read_cycles_by_hand():
    # 1024 tokens, d = 64: iWuR Q.K^T 64 tokens x 4 rows per VAC, P.V 4 channels x 64 blocks.
    qk = R.kv_read_cycles(1024, "qk", DEFAULT)
    pv = R.kv_read_cycles(1024, "pv", DEFAULT)
    assert (qk.cycles, qk.utilization, pv.cycles, pv.utilization) == (256, 1.0, 256, 1.0)
    # Baseline with staging buffers: Q.K^T 4 blocks of 16 slots x 64 channel rows, the same 256;
    # P.V one row per token, 4 of its 16 bytes used: 1024 reads, a quarter of each port.
    qk = R.kv_read_cycles(1024, "qk", DEFAULT, "baseline")
    pv = R.kv_read_cycles(1024, "pv", DEFAULT, "baseline")
    assert (qk.cycles, qk.utilization, pv.cycles, pv.utilization) == (256, 1.0, 1024, 0.25)
    assert R.layout_cycles(1024, "pv", DEFAULT, "baseline") == \
        R.softmax_pv_cycles(1024, DEFAULT).total + 1024 - 256
    assert R.layout_cycles(1024, "qk", DEFAULT, "baseline") == R.qk_cycles(1024, DEFAULT).total + 60
    # 17 tokens: P.V reads 2 blocks, the second holding 1 token: 17 / 32 of the bytes read.
    assert R.kv_read_cycles(17, "pv", DEFAULT).utilization == pytest.approx(17 / 32)


def test_write_cycles_by_hand():
    assert R.kv_write_cycles(DEFAULT) == {"gbus": 16, "k": 16, "v": 4}
    assert R.kv_write_cycles(DEFAULT, "baseline") == {"gbus": 16, "k": 64, "v": 1}


# --- attention, GQA, cache against flat ---------------------------------------------------------


ATT = {"score_m": 1 << 30, "score_shift": 38, "scale": R.log2_scale(0.05), "m": 1 << 30,
       "shift": 37}


def attention_by_hand(q, K, V, group_size, mode):
    """Per head, from its group's flat K and V: Q.K^T, requantize, softmax-P.V."""
    out = []
    for h in range(q.shape[0]):
        g = h // group_size
        acc = K[g] @ q[h]
        s = [requant_reference(a, ATT["score_m"], ATT["score_shift"]) for a in acc]
        out.append(R.softmax_pv(s, V[g], ATT["scale"], ATT["m"], ATT["shift"], DEFAULT,
                                mode=mode))
    return np.array(out)


@pytest.mark.parametrize("mode", R.MODES)
@pytest.mark.parametrize("group_size", [1, 2, 3])
def test_cached_attention_equals_flat(mode, group_size):
    """K broadcast to its owner plus local V (each VAC reading only its rows) gives the flat
    attention bit for bit."""
    params = R.DxtConfig(group_size=group_size)
    rng = np.random.default_rng(group_size)
    groups, T = 2, 77
    q = rng.integers(-128, 128, (groups * group_size, 64))
    K = rng.integers(-128, 128, (groups, T, 64))
    V = rng.integers(-128, 128, (groups, T, 64))
    images = [R.kv_image(K[g], V[g], params) for g in range(groups)]
    flat = R.attention(q, K, V, params=params, mode=mode, **ATT)
    assert np.array_equal(R.attention_cached(q, images, params=params, mode=mode, **ATT), flat)
    assert np.array_equal(flat, attention_by_hand(q, K, V, group_size, mode))
    assert len(np.unique(flat)) > 20                   # the outputs are not trivial


@pytest.mark.parametrize("params", [SMALL, UNEVEN])
def test_cached_attention_uneven_shapes(params):
    rng = np.random.default_rng(6)
    T = R.kv_capacity(params) - 1
    d = params.head_dim
    q = rng.integers(-128, 128, (1, d))
    K, V = rng.integers(-128, 128, (1, T, d)), rng.integers(-128, 128, (1, T, d))
    args = dict(ATT, score_shift=30)
    flat = R.attention(q, K, V, params=params, **args)
    cached = R.attention_cached(q, [R.kv_image(K[0], V[0], params)], params=params, **args)
    assert np.array_equal(cached, flat)


def test_gqa_outputs_identical_for_every_group_size_when_heads_share_kv():
    rng = np.random.default_rng(7)
    heads, T = 4, 50
    q = rng.integers(-128, 128, (heads, 64))
    K0, V0 = rng.integers(-128, 128, (T, 64)), rng.integers(-128, 128, (T, 64))
    outs = []
    for G in (1, 2, 4):
        params = R.DxtConfig(group_size=G)
        K = np.stack([K0] * (heads // G))
        V = np.stack([V0] * (heads // G))
        images = [R.kv_image(K0, V0, params)] * (heads // G)
        out = R.attention(q, K, V, params=params, **ATT)
        assert np.array_equal(R.attention_cached(q, images, params=params, **ATT), out)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    assert not np.array_equal(outs[0][0], outs[0][1])   # heads differ (different queries)


def test_kv_groups_by_hand():
    assert R.kv_groups(6, 3).tolist() == [0, 0, 0, 1, 1, 1]
    assert R.kv_groups(4, 1).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="^Query head count must be a multiple of the GQA group "
                                         "size 4, not 6$"):
        R.kv_groups(6, 4)


# --- fused against sequential: documented difference --------------------------------------------


def test_rmsnorm_modes_gap_within_bound():
    rng = np.random.default_rng(8)
    differ = 0
    for K in (16, 256, 1024):
        W = rng.integers(-127, 128, (32, K))
        x = rng.integers(-127, 128, K)
        m, shift = 1 << 30, 31 + int(math.log2(math.sqrt(K) * 16)) + 3
        f = R.rmsnorm_gemv(W, x, m, shift, 0, BIG_WMEM)
        s = R.rmsnorm_gemv(W, x, m, shift, 0, BIG_WMEM, mode="sequential")
        factor = R.rms_rc(x, 0, BIG_WMEM)[3]
        gap = R.mode_gap_bound(W, x, factor, m, shift, BIG_WMEM)
        assert (np.abs(f - s) <= gap).all()
        differ += int((f != s).sum())
    assert differ > 0


def test_softmax_modes_gap_within_bound():
    rng = np.random.default_rng(9)
    differ = 0
    for T in (3, 64, 500):
        s = rng.integers(-60, 60, T)
        V = rng.integers(-127, 128, (T, 64))
        f = R.softmax_pv(s, V, f32(0.125), 1 << 30, 37, DEFAULT)
        q = R.softmax_pv(s, V, f32(0.125), 1 << 30, 37, DEFAULT, mode="sequential")
        p = R.softmax_activations(s, f32(0.125))[2]
        factor = R.softmax_rc(p, DEFAULT)[2]
        gap = R.mode_gap_bound(V.T, p, factor, 1 << 30, 37, DEFAULT)
        assert (np.abs(f - q) <= gap).all()
        differ += int((f != q).sum())
    assert differ > 0


# --- accuracy against float64 -------------------------------------------------------------------


def check_rmsnorm(W, x, m, shift, eps, params=BIG_WMEM):
    lo, hi = params.out_limits
    ref = np.clip(R.rmsnorm_gemv_reference(W, x, m, shift, eps, params.norm_frac), lo, hi)
    worst = {}
    for mode in R.MODES:
        out = R.rmsnorm_gemv(W, x, m, shift, eps, params, mode=mode)
        bound = R.rmsnorm_error_bound(W, x, m, shift, eps, params, mode=mode)
        assert (np.abs(out - ref) <= bound).all(), mode
        worst[mode] = bound.max()
    return worst


@pytest.mark.parametrize("K, spread", [(64, 127), (1024, 127), (1024, 3), (4096, 127)])
def test_rmsnorm_within_bound_random(K, spread):
    rng = np.random.default_rng(K + spread)
    for _ in range(3):
        W = rng.integers(-127, 128, (24, K))
        x = rng.integers(-spread, spread + 1, K)
        m = rng.integers(1 << 30, 1 << 31, 24)
        shift = 31 + round(math.log2(math.sqrt(K) * 16 * 127 / 40))
        worst = check_rmsnorm(W, x, m, shift, int(R.eps_code(1e-5, 0.05)))
        assert worst["fused"] < 0.52                       # 0.5 + k * (0.5 + tiny)


def test_rmsnorm_within_bound_corners():
    rng = np.random.default_rng(10)
    W = rng.integers(-127, 128, (16, 256))
    shift = 31 + 6
    # All-zero input, with and without eps; eps dominating a tiny input; one spike.
    for eps in (0, int(f32(2.0 ** -10)), int(R.eps_code(1e-5, 0.05))):
        check_rmsnorm(W, np.zeros(256, int), 1 << 30, shift, eps)
    tiny = np.zeros(256, int)
    tiny[[3, 77]] = [1, -1]
    worst = check_rmsnorm(W, tiny, 1 << 30, shift, int(f32(0.5)))
    assert worst["fused"] < 0.52
    spike = np.zeros(256, int)
    spike[5] = -128
    check_rmsnorm(W, spike, 1 << 30, shift, 0, R.DxtConfig(clamp="full", wmem_depth=1 << 16))


def test_rmsnorm_fused_bound_is_nearly_reached():
    """Both roundings show: with k = 1/2 the PPU rounds ties, so the worst error approaches
    0.5 + k * 0.5 = 0.75; the bound's RCU term is needed."""
    rng = np.random.default_rng(14)
    W, x = rng.integers(-2, 3, (1024, 64)), rng.integers(-127, 128, 64)   # outputs unclipped
    out = R.rmsnorm_gemv(W, x, 1, 1, 0, BIG_WMEM)
    ref = np.clip(R.rmsnorm_gemv_reference(W, x, 1, 1, 0, 4), -127, 127)
    bound = R.rmsnorm_error_bound(W, x, 1, 1, 0, BIG_WMEM)
    err = np.abs(out - ref)
    assert (err <= bound).all() and bound.max() < 0.751
    assert err.max() > 0.74


def test_rmsnorm_bound_catches_a_wrong_scale():
    """Not vacuous: an output off by one fraction bit (the RCU's shift off by one) breaks it."""
    rng = np.random.default_rng(11)
    W, x = rng.integers(-127, 128, (32, 256)), rng.integers(-127, 128, 256)
    m, shift = 1 << 30, 31 + 7
    wrong = R.rmsnorm_gemv(W, x, m, shift + 1, 0, BIG_WMEM)     # y / 2
    ref = np.clip(R.rmsnorm_gemv_reference(W, x, m, shift, 0, 4), -127, 127)
    assert (np.abs(wrong - ref) > R.rmsnorm_error_bound(W, x, m, shift, 0, BIG_WMEM)).any()


def check_softmax(s, V, scale, params=DEFAULT):
    lo, hi = params.out_limits
    m, shift = 1 << 30, 37
    ref = np.clip(R.softmax_pv_reference(s, V, scale, m, shift, params.prob_frac), lo, hi)
    worst = {}
    for mode in R.MODES:
        out = R.softmax_pv(s, V, scale, m, shift, params, mode=mode)
        bound = R.softmax_error_bound(s, V, scale, m, shift, params, mode=mode)
        assert (np.abs(out - ref) <= bound).all(), mode
        worst[mode] = (np.abs(out - ref).max(), bound.max())
    return worst


@pytest.mark.parametrize("T, step", [(1, 0.1), (16, 0.1), (256, 0.1), (1024, 0.03)])
def test_softmax_within_bound_random(T, step):
    rng = np.random.default_rng(T)
    for _ in range(3):
        s = np.clip(np.rint(rng.normal(0, 30, T)), -128, 127).astype(int)
        V = rng.integers(-127, 128, (T, 64))
        check_softmax(s, V, R.log2_scale(step))


def test_softmax_within_bound_dominant_and_equal():
    rng = np.random.default_rng(12)
    V = rng.integers(-127, 128, (600, 64))
    dominant = np.r_[127, rng.integers(-128, -100, 599)]  # others below 2**-32: weight 1
    worst = check_softmax(dominant, V, R.log2_scale(0.1))
    assert worst["fused"][1] < 0.52                        # 0.5 + k * (0.5 + tiny)
    check_softmax(np.r_[127, rng.integers(-128, 20, 599)], V, R.log2_scale(0.1))
    worst = check_softmax(np.full(600, -3), V, R.log2_scale(0.1))
    assert worst["fused"][1] < 0.52                        # exact weights: same bound
    # Equal scores, sequential: 1/600 * 128 = 0.21 rounds to 0: the output collapses to 0.
    seq = R.softmax_pv(np.full(600, -3), V, R.log2_scale(0.1), 1 << 30, 37, DEFAULT,
                       mode="sequential")
    assert not seq.any()


def test_softmax_bound_catches_a_wrong_scale():
    rng = np.random.default_rng(13)
    s = rng.integers(-40, 40, 64)
    V = rng.integers(-127, 128, (64, 64))
    # A score scale without log2(e) (exp2 of the natural-log argument): the weights are wrong.
    wrong = R.softmax_pv(s, V, f32(0.125), 1 << 30, 37, DEFAULT)
    true_scale = R.log2_scale(0.125)
    ref = np.clip(R.softmax_pv_reference(s, V, true_scale, 1 << 30, 37, 7), -127, 127)
    bound = R.softmax_error_bound(s, V, true_scale, 1 << 30, 37, DEFAULT)
    assert (np.abs(wrong - ref) > bound).any()


def test_rsqrt_step_is_the_shared_unit():
    x = np.array([3, 4, 5, -7])
    S, variance, r, _ = R.rms_rc(x, int(f32(0.25)), DEFAULT)
    assert S == 99
    # fp32(99) * fp32(1/4) = 24.75 exactly, + 0.25 = 25.0 exactly; rsqrt(25) = 0.2.
    assert int(variance) == int(f32(25.0))
    assert int(r) == int(rsqrt(f32(25.0)))
    assert abs(float(to_float(r, FP32)) - 0.2) <= 0.2 * 2 ** -23.9


# --- cycle formulas -----------------------------------------------------------------------------


def test_latency_defaults_are_the_shared_units():
    from hdl.arith.convert import IntToFloat
    from hdl.arith.exp2 import Exp2
    from hdl.arith.fpadd import FloatAdder
    from hdl.arith.fpmul import FloatMultiplier
    from hdl.arith.idot import IntDot
    from hdl.arith.recip import Reciprocal, RSqrt
    from hdl.arith.requant import SHIFT_BITS, Requantizer
    lat = R.Latency()
    assert lat.requant == Requantizer().latency
    # An activation lane's conversion and the RC unit's of the INT32 sum register their
    # magnitude (four stages).
    assert lat.int_to_float == IntToFloat(stages=4).latency == IntToFloat().latency + 1
    assert lat.sum_to_float == IntToFloat(stages=4).latency == 4
    # An activation lane's multiply: its pieces land in a register before their sum.
    assert lat.fmul == FloatMultiplier(land_pieces=True).latency == FloatMultiplier().latency + 1
    # The RC unit's: the multiply-add's multiplier with its pieces landed and its adder with its
    # compare registered too, the Newton-Raphson units with every product landed (two cycles
    # more per multiply).
    assert lat.fmac == FloatMultiplier().latency + FloatAdder().latency + 2
    assert lat.exp2 == Exp2().latency
    assert lat.rsqrt == RSqrt(land_products=True).latency == RSqrt().latency + 12
    assert lat.reciprocal == Reciprocal(round_register=True, land_products=True).latency
    for lanes in (1, 4, 16, 64):
        assert lat.dot(lanes) == IntDot(lanes).latency
    assert R.SHIFT_MAX == (1 << SHIFT_BITS) - 1


def schedule(outputs, inputs, params, lat=R.Latency(), start=0):
    """Independent per-chunk walk: chunk j of pass p reaches VAC v at start + p*C + j + v; every
    VAC computes one output per pass (the last pass's padding outputs too)."""
    N, C = params.vacs, -(-inputs // params.lanes)
    ready = {}
    for o in range(-(-outputs // N) * N):
        p, v = divmod(o, N)
        last = max(start + p * C + j + v for j in range(C))
        ready[o] = last + lat.dot(params.lanes) + lat.accumulate
    return ready


def rcu_entries(ready, vacs, rc_ready):
    """Cycle by cycle: each VAC's RCU takes its oldest finished accumulator, one per cycle, from
    rc_ready on; returns the cycle each output enters."""
    pending = {v: sorted((r, o) for o, r in ready.items() if o % vacs == v)
               for v in range(vacs)}
    cycle, entry = 0, {}
    while any(pending.values()):
        for queue in pending.values():
            if queue and cycle >= rc_ready and queue[0][0] <= cycle:
                entry[queue.pop(0)[1]] = cycle
        cycle += 1
    return entry


def last_rcu_entry(ready, vacs, rc_ready):
    return max(rcu_entries(ready, vacs, rc_ready).values())


def gbus_done(results):
    """Cycle by cycle: one GBUS word of 4 results (in output order) per cycle, once all its
    results are at the gatherer (3 cycles after the PPU: the VAC's result queue 2, the
    gatherer's skid buffer 1); returns the cycle after the last."""
    cycle = 0
    outputs = sorted(results)
    for first in range(0, len(outputs), 4):
        word = outputs[first:first + 4]
        while cycle < max(results[o] + 3 for o in word):
            cycle += 1
        cycle += 1
    return cycle


@pytest.mark.parametrize("outputs, inputs", [(1, 1), (16, 16), (17, 16), (40, 100), (300, 64),
                                             (5, 2000), (33, 20)])
def test_gemv_cycles_match_schedule(outputs, inputs):
    lat = R.Latency()
    ready = schedule(outputs, inputs, DEFAULT)
    got = R.gemv_cycles(outputs, inputs, DEFAULT)
    assert got.total == max(ready.values()) + lat.ppu + 1
    assert got.done == gbus_done({o: r + lat.ppu for o, r in ready.items()})
    assert got.macs == outputs * inputs
    # Fused: the RC factor is ready when the VE's chain over the C chunks is done (dot 5,
    # accumulator 1, sum_to_float 4, fmul 6 (its pieces landed), fadd 7, rsqrt 28, conversion 4,
    # its output register 1, broadcast 1).
    C = -(-inputs // 16)
    rc_ready = C - 1 + 5 + 1 + 4 + 6 + 7 + 28 + 4 + 1 + 1
    fused = R.rmsnorm_gemv_cycles(outputs, inputs, DEFAULT)
    assert fused.rc_ready == rc_ready
    entries = rcu_entries(ready, 16, rc_ready)
    # RCU 7 (its operands in its blocks' input registers, its partial products registered
    # twice, its shift in two steps) and PPU 8 (its input register, then as the RCU).
    assert fused.total == max(entries.values()) + 15 + 1
    assert fused.done == gbus_done({o: e + 15 for o, e in entries.items()})
    assert fused.hold == sum(1 for o, r in ready.items() if o % 16 == 0 and r < rc_ready)
    # Sequential: the factor, the sequencer's wait 1, C normalizing reads, the GEMV's lead 32
    # (request 25, chunk queue 2, operand path 5), then the plain GEMV.
    seq = R.rmsnorm_gemv_cycles(outputs, inputs, DEFAULT, mode="sequential")
    assert seq.total == rc_ready + 1 + C + 32 + got.total
    assert seq.done == rc_ready + 1 + C + 32 + got.done


def test_gemv_cycles_by_hand():
    # 16 x 16 on 16 VACs: one chunk each; VAC 15 gets it at cycle 15, IntDot 5, accumulator 1,
    # PPU 8: result at cycle 29, 30 cycles. Fused: rc at 0 + 5 + 1 + 4 + 6 + 7 + 28 + 4 + 1 + 1
    # = 57, RCU 7 + PPU 8: 73 cycles.
    plain = R.gemv_cycles(16, 16, DEFAULT)
    assert (plain.total, plain.utilization) == (30, 256 / (256 * 30))
    fused = R.rmsnorm_gemv_cycles(16, 16, DEFAULT)
    assert (fused.total, fused.rc_ready, fused.hold) == (73, 57, 1)


def test_long_gemv_utilization_and_fused_overhead():
    for M, K in ((1024, 1024), (3072, 1024), (1152, 512), (1024, 512)):
        plain = R.gemv_cycles(M, K, DEFAULT)
        fused = R.rmsnorm_gemv_cycles(M, K, DEFAULT)
        seq = R.rmsnorm_gemv_cycles(M, K, DEFAULT, mode="sequential")
        assert plain.utilization >= 0.95
        # A VAC parks the accumulators it finishes during the VE's 50 cycles after the stream
        # (sum_to_float 4, fmac 12, rsqrt 28, conversion 4, its register 1, broadcast 1):
        # ceil(50 / C).
        C = K // 16
        assert fused.total <= 1.05 * plain.total and fused.hold == -(-50 // C)
        assert seq.total > fused.total


@pytest.mark.parametrize("tokens", [1, 16, 100, 1024])
def test_softmax_pv_cycles_match_schedule(tokens):
    # The activations reach VAC 0 and the VE's sum at cycle j; the reciprocal waits for the
    # RMSNorm path (fmac 13 + rsqrt 28 = 41 > 21), so rc_ready is RMSNorm's formula.
    C = -(-tokens // 16)
    rc_ready = C - 1 + 5 + 1 + 4 + 41 + 4 + 1 + 1
    ready = schedule(64, tokens, DEFAULT)
    fused = R.softmax_pv_cycles(tokens, DEFAULT)
    assert fused.rc_ready == rc_ready
    assert fused.total == last_rcu_entry(ready, 16, rc_ready) + 15 + 1
    seq = R.softmax_pv_cycles(tokens, DEFAULT, mode="sequential")
    assert seq.total == rc_ready + 1 + C + 32 + R.gemv_cycles(64, tokens, DEFAULT).total
    assert seq.total > fused.total
    # Score read 2, E = int_to_float 4 (its magnitude registered) + fmul 6 (its pieces landed)
    # + exp2 7 + split 1 + requant 4, the register behind the token buffer 1, queue 2, row 5.
    assert R.Latency().lead == 2 + 22 + 1 + 2 + 5


@pytest.mark.parametrize("tokens", [1, 5, 64, 100, 1024])
def test_qk_cycles_match_a_cycle_by_cycle_bus(tokens):
    ready = schedule(tokens, 64, DEFAULT)
    got = R.qk_cycles(tokens, DEFAULT)
    assert got.total == got.done == gbus_done({t: r + 8 for t, r in ready.items()})   # PPU 8


# --- argument errors ----------------------------------------------------------------------------


def test_argument_messages():
    W, x = np.zeros((2, 4), int), np.zeros(4, int)
    cases = [
        (lambda: R.gemv(W.astype(float), x, 1, 0, DEFAULT), TypeError,
         "Weights must be an integer array, not float64"),
        (lambda: R.gemv(W + 200, x, 1, 0, DEFAULT), ValueError,
         "Weights must be between -128 and 127, not 200"),
        (lambda: R.gemv(W, np.zeros(5, int), 1, 0, DEFAULT), ValueError,
         r"Activations must have 4 elements \(the weights' inputs\), not 5"),
        (lambda: R.gemv(np.zeros(4, int), x, 1, 0, DEFAULT), ValueError,
         r"Weights must be a non-empty \(outputs, inputs\) array, not shape \(4,\)"),
        (lambda: R.gemv(W, x, 1, 64, DEFAULT), ValueError,
         "PPU shift must be between 0 and 63, not 64"),
        (lambda: R.gemv(W, x, 1 << 31, 0, DEFAULT), ValueError,
         "PPU multiplier must be between -2147483648 and 2147483647, not 2147483648"),
        (lambda: R.gemv(W, x, [1, 2, 3], 0, DEFAULT), ValueError,
         r"PPU multiplier must be a scalar or one value per output \(2\), not shape \(3,\)"),
        (lambda: R.gemv(W, x, 1, 0, "default"), TypeError,
         "Parameters must be a DxtConfig, not str"),
        (lambda: R.rmsnorm_gemv(W, x, 1, 0, 0, DEFAULT, mode="fast"), ValueError,
         "Mode must be 'fused' or 'sequential', not 'fast'"),
        (lambda: R.rmsnorm_gemv(W, x, 1, 0, 1, DEFAULT), ValueError,
         "RMSNorm eps must be [+]0 or a positive normal fp32 value, not 0x00000001"),
        (lambda: R.rmsnorm_gemv(W, x, 1, 0, 0.5, DEFAULT), TypeError,
         r"RMSNorm eps must be an fp32 bit pattern \(an integer\), not 0.5"),
        (lambda: R.rmsnorm_gemv(np.zeros((1, 1 << 17), int), np.zeros(1 << 17, int), 1, 0, 0,
                                R.DxtConfig(wmem_depth=1 << 20)), ValueError,
         r"GEMV input of 131072 needs 8192 token-buffer chunks, more than the tile's 256 \(16 "
         r"lanes each; max_inputs 4096\)"),
        (lambda: R.gemv(np.zeros((1, 4097), int), np.zeros(4097, int), 1, 0,
                        R.DxtConfig(wmem_depth=1 << 20, max_inputs=4096)), ValueError,
         r"GEMV input of 4097 needs 257 token-buffer chunks, more than the tile's 256 \(16 "
         r"lanes each; max_inputs 4096\)"),
        (lambda: R.accumulate(np.zeros((1, 1 << 17), int), np.zeros(1 << 17, int)), ValueError,
         "Input length must be between 1 and 65536, not 131072"),
        (lambda: R.softmax_pv([1, 2], np.zeros((2, 4), int), 0, 1, 0, DEFAULT), ValueError,
         "Softmax scale must be a positive normal fp32 value, not 0x00000000"),
        (lambda: R.softmax_pv([1, 2], np.zeros((3, 4), int), ONE, 1, 0, DEFAULT), ValueError,
         r"Values must have shape \(2, 'd'\) for scores of shape \(2,\), not \(3, 4\)"),
        (lambda: R.softmax_pv([300], np.zeros((1, 4), int), ONE, 1, 0, DEFAULT), ValueError,
         "Scores must be between -128 and 127, not 300"),
        (lambda: R.kv_image(np.zeros((2, 8), int), np.zeros((2, 8), int), DEFAULT), ValueError,
         r"Keys must have 64 channels \(the head dimension\), not 8"),
        (lambda: R.kv_image(np.zeros((2, 8), int), np.zeros((3, 8), int), SMALL), ValueError,
         r"Values must have the keys' shape \(2, 8\), not \(3, 8\)"),
        (lambda: R.kv_image(np.zeros((2, 8), int), np.zeros((2, 8), int), SMALL, "flat"),
         ValueError, "Layout must be 'iwur' or 'baseline', not 'flat'"),
        (lambda: R.kv_read_cycles(10, "qv", DEFAULT), ValueError,
         "Operation must be 'qk' or 'pv', not 'qv'"),
        (lambda: R.attention(np.zeros((3, 64), int), np.zeros((2, 4, 64), int),
                             np.zeros((2, 4, 64), int), params=DEFAULT, **ATT), ValueError,
         r"Query head count must be 2 \(2 KV groups of 1\), not 3"),
        (lambda: R.qk_scores(np.zeros(8, int), np.zeros((4, 7), int), 1, 0, DEFAULT), ValueError,
         r"Keys must have shape \('T', 8\) for a query of shape \(8,\), not \(4, 7\)"),
        (lambda: R.gemv_cycles(0, 4, DEFAULT), ValueError,
         "Output count must be between 1 and 1073741824, not 0"),
        (lambda: R.softmax_pv_cycles(1 << 17, DEFAULT), ValueError,
         "Token count must be between 1 and 65536, not 131072"),
        (lambda: R.log2_scale(0), ValueError, "Score step must be positive and finite, not 0"),
        (lambda: R.to_rc(ONE, 31, DEFAULT), ValueError,
         "RC fraction bits must be between 0 and 30, not 31"),
        (lambda: R.kv_address("q", 0, 0, DEFAULT), ValueError,
         "KV kind must be 'k' or 'v', not 'q'"),
        (lambda: R.attention_cached(np.zeros((1, 8), int), [], params=SMALL, **ATT), ValueError,
         "Images must be a non-empty sequence of iWuR KVImage"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=f"^{message}$"):
            call()


def test_the_registry_parameters_drive_the_models():
    """The registry's ``rdxe-dxt`` parameters go to the models as they are (no translation):
    they are a ``DxtConfig``, and give the results of the ``DxtConfig`` of the same fields; a
    VAC's own steps take the ``rdxe-vac`` parameters, a ``VacConfig``. Anything else is refused
    with the types the model takes."""
    from memwall import registry

    cfg = registry.get("rdxe-dxt").parameters("small")
    assert isinstance(cfg, R.DxtConfig)
    same = R.DxtConfig(**{f.name: getattr(cfg, f.name) for f in fields(R.DxtConfig)})
    rng = np.random.default_rng(3)
    W, x = rng.integers(-128, 128, (8, 32)), rng.integers(-128, 128, 32)
    assert np.array_equal(R.gemv(W, x, 3, 9, cfg), R.gemv(W, x, 3, 9, same))
    assert np.array_equal(R.wmem_image(W, cfg), R.wmem_image(W, same))
    for kind in ("k", "v"):
        got = R.kv_address(kind, 5, np.arange(cfg.head_dim), cfg)
        want = R.kv_address(kind, 5, np.arange(cfg.head_dim), same)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert R.qk_cycles(16, cfg) == R.qk_cycles(16, same)
    vac = registry.get("rdxe-vac").parameters("small")
    assert isinstance(vac, R.VacConfig)
    acc = R.accumulate(W, x)
    assert np.array_equal(R.ppu(acc, 3, 9, vac), R.ppu(acc, 3, 9, same))
    with pytest.raises(TypeError, match="^Parameters must be a VacConfig or a DxtConfig, "
                                        "not str$"):
        R.ppu(acc, 3, 9, "small")
    with pytest.raises(TypeError, match="^Parameters must be a DxtConfig, not VacParams$"):
        R.gemv(W, x, 3, 9, vac)


def test_a_gemv_on_a_ring_takes_a_vac_count():
    """A GEMV's layout and cycles run on a tile (its VAC count) or on a ring of ``vacs`` VACs of
    one VacConfig; a VAC count with a tile, or none with a VAC, is refused."""
    W = np.ones((6, 8), int)
    assert R.wmem_image(W, VAC_SMALL, vacs=3).shape == (3, 64, 4)
    assert R.gemv_cycles(6, 8, SMALL) == R.gemv_cycles(6, 8, VAC_SMALL, vacs=4)
    assert R.rmsnorm_gemv_cycles(6, 8, SMALL, mode="sequential") == \
        R.rmsnorm_gemv_cycles(6, 8, VAC_SMALL, mode="sequential", vacs=4)
    cases = [
        (lambda: R.wmem_image(W, SMALL, vacs=4), TypeError,
         r"VAC count must be None with a DxtConfig \(it has 4\), not 4"),
        (lambda: R.gemv_cycles(6, 8, VAC_SMALL), TypeError,
         "VAC count must be an integer between 1 and 64 with a VacConfig, not None"),
        (lambda: R.rmsnorm_gemv_cycles(6, 8, VAC_SMALL, vacs=65), ValueError,
         "VAC count must be between 1 and 64, not 65"),
        (lambda: R.wmem_image(W, "small", vacs=2), TypeError,
         "Parameters must be a DxtConfig or a VacConfig, not str"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=f"^{message}$"):
            call()


@pytest.mark.parametrize("mult_bits", [8, 16, 32])
@pytest.mark.parametrize("scale", [1e-6, 0.0123, 0.5, 1.0, 3.7, 100.0])
def test_ppu_code_is_the_nearest_multiplier_and_shift(scale, mult_bits):
    m, shift = R.ppu_code(scale, mult_bits)
    assert 1 <= m < 1 << (mult_bits - 1) and 0 <= shift <= R.SHIFT_MAX
    # The largest shift that keeps m in range: m has its top bit set unless the shift ran out.
    assert m >= 1 << (mult_bits - 3) or shift in (0, R.SHIFT_MAX)
    if shift not in (0, R.SHIFT_MAX):
        assert abs(m / 2 ** shift - scale) <= 2 ** -(shift + 1) * (1 + 1e-9)


def test_ppu_code_refuses_a_scale_that_is_not_positive():
    with pytest.raises(ValueError, match=r"^PPU scale must be positive and finite, not -1\.0$"):
        R.ppu_code(-1.0, 32)
