"""Tests of golden/flowkv.py: hand-computed cases first, then the operation order against a scalar
re-implementation, then the float64 reference and the error bound, then pinned errors.

Where chunk-size invariance is asserted it must hold by construction (docs/flowkv_models.md,
"Chunk size"); elsewhere results may differ with the chunk size, and one test shows that they do.
"""

import math
from decimal import Decimal, getcontext

import ml_dtypes
import numpy as np
import pytest

import golden.flowkv as fk
from golden.arith.float import fadd, fdot, fmul, from_float, to_float
from golden.arith.func import exp2, reciprocal
from hdl.arith.format import BF16, FP32, float_format

ONE = 0x3F800000
NEG_INF = 0xFF800000


def bf16(values) -> np.ndarray:
    """BF16 codes of values that bf16 holds exactly (checked)."""
    x = np.asarray(values, dtype=np.float64)
    codes = np.asarray(x, dtype=ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(codes.view(ml_dtypes.bfloat16).astype(np.float64), x)
    return codes


def normal(rng, shape, scale=1.0) -> np.ndarray:
    return from_float(scale * rng.standard_normal(shape), BF16)


def f32(code) -> float:
    return float(to_float(np.uint32(code), FP32))


def case(seed, heads, length, d, q_scale=1.0):
    rng = np.random.default_rng(seed)
    return (normal(rng, (heads, d), q_scale), normal(rng, (length, d)), normal(rng, (length, d)))


# --- hand-computed cases --------------------------------------------------------------------------


def test_score_scale_constants():
    assert int(fk.score_scale(1)) == 0x3FB8AA3B          # fp32(log2 e) = 1.44269502162933...
    assert int(fk.score_scale(4)) == 0x3F38AA3B          # the same significand, halved
    assert int(fk.score_scale(256)) == 0x3DB8AA3B        # the paper's d: log2(e) / 16
    assert f32(fk.score_scale(256)) == pytest.approx(math.log2(math.e) / 16, rel=2 ** -24)


def test_score_scale_is_correctly_rounded():
    # The float64 quotient is rounded to fp32 once; check that this equals the rounding of the
    # exact value (40 digits) and that the float64 value is nowhere near an fp32 rounding tie.
    getcontext().prec = 40
    log2e = 1 / Decimal(2).ln()
    for d in range(1, 1025):
        exact = float(log2e / Decimal(d).sqrt())
        code = int(fk.score_scale(d))
        assert code == int(from_float(exact, FP32)), d
        value = f32(code)
        ulp = math.ulp(np.float32(value).item()) * 2 ** 29      # fp32 ulp from the float64 one
        assert abs(abs(exact - value) - ulp / 2) > ulp * 2 ** -20, d


def test_tree_sum_order_hand():
    tiny = 2.0 ** -24
    # (1 + 0) + (2**-24 + 2**-24) = 1 + 2**-23; left to right it would stay 1 (ties to even).
    x = from_float([1.0, 0.0, tiny, tiny], FP32)
    assert int(fk.tree_sum(x)) == 0x3F800001
    # Odd counts pass the last value through: (v0 + v1) + v2, and ((v0+v1)+(v2+v3)) + (v4+v5).
    assert int(fk.tree_sum(from_float([tiny, tiny, 1.0], FP32))) == 0x3F800001
    assert int(fk.tree_sum(from_float([1.0, tiny, tiny], FP32))) == ONE
    assert int(fk.tree_sum(from_float([1.0, 0, 0, 0, tiny, tiny], FP32))) == 0x3F800001
    assert int(fk.tree_sum(from_float([5.0], FP32))) == int(from_float(5.0, FP32))


def test_tree_sum_matches_fdot_for_powers_of_two():
    rng = np.random.default_rng(3)
    for n in (1, 2, 4, 64, 256):
        x = from_float(rng.standard_normal((7, n)) * 2.0 ** rng.integers(-30, 30, (7, n)), FP32)
        ones = np.full(n, ONE, np.uint32)
        assert np.array_equal(fk.tree_sum(x), fdot(x, ones, FP32, FP32)), n


def test_dot_score_order_hand():
    q = bf16([[1, 1, 1, 1]])
    k = bf16([[1, 0, 2.0 ** -24, 2.0 ** -24],        # neighbour tree: 1 + 2**-23
              [2.0 ** -24, 1, 2.0 ** -24, 0]])       # (2**-24 + 1) + 2**-24 = 1
    assert fk.dot_scores(q, k).tolist() == [[0x3F800001, ONE]]


@pytest.mark.parametrize("d", [8, 24, 64, 256])
def test_dot_scores_equal_lane_beats_then_beat_tree(d):
    """The order of the documented RTL realisation (a P-lane FloatDot per beat, then a pairwise
    tree over the d/P beat sums) gives the same bits for every P: the model is lane-free."""
    rng = np.random.default_rng(d)
    q, K = normal(rng, (3, d)), normal(rng, (40, d))
    want = fk.dot_scores(q, K)
    for lanes in (p for p in (1, 2, 4, 8, 16, 32, 64) if d % p == 0):
        beats = fdot(q.reshape(3, 1, d // lanes, lanes), K.reshape(1, 40, d // lanes, lanes),
                     BF16, FP32)
        assert np.array_equal(fk.tree_sum(beats), want), lanes
    # Not vacuous: accumulating the 8-lane beat sums left to right gives different bits.
    beats = fdot(q.reshape(3, 1, d // 8, 8), K.reshape(1, 40, d // 8, 8), BF16, FP32)
    serial = beats[..., 0]
    for b in range(1, d // 8):
        serial = fadd(serial, beats[..., b], FP32)
    assert d // 8 < 4 or not np.array_equal(serial, want)    # 3 beats: both are (b0+b1)+b2


def test_single_key_returns_its_value():
    q = bf16([[0.5, -3, 1.25, 7]])
    K = bf16([[2, 1, -1, 0.125]])
    V = bf16([[1.5, -2, 0.375, 3072]])
    out = fk.attend(q, K, V, 0, chunk=4)
    assert out.dtype == np.uint16 and np.array_equal(out, V)
    out32 = fk.attend(q, K, V, 0, chunk=1, out_fmt="fp32")
    assert out32.dtype == np.uint32 and np.array_equal(out32, V.astype(np.uint32) << 16)
    _, (step,) = fk.attend_trace(q, K, V, 0, chunk=4)
    # S = 1 - 3 - 1.25 + 0.875 = -2.375; S' = fp32(-2.375 * scale); F = exp2(+-0) = 1.
    scaled = fmul(from_float(-2.375, FP32), fk.score_scale(4), FP32, FP32, FP32)
    assert int(step.s[0, 0]) == int(scaled) == int(step.m[0])
    assert step.s[0, 1:].tolist() == [NEG_INF] * 3
    assert step.f.tolist() == [[ONE, 0, 0, 0]]
    assert step.c.tolist() == [0] and step.l.tolist() == [ONE]
    assert np.array_equal(step.y, V.astype(np.uint32) << 16)


def test_all_equal_scores_give_the_mean():
    q = bf16([[0, 0, 0, 0]])                                  # every score +0: F = 1
    V = bf16([[1, 3, -8, 0.5], [2, 3, 8, 0.5], [3, 3, 1, 0.5], [6, 3, 3, 0.5]])
    K = bf16(np.arange(16).reshape(4, 4) - 7.0)
    for chunk in (1, 2, 3, 4, 64):
        out = fk.attend(q, K, V, 3, chunk=chunk)
        assert out.tolist() == bf16([[3, 3, 1, 0.5]]).tolist(), chunk     # sums / 4, exact
        _, steps = fk.attend_trace(q, K, V, 3, chunk=chunk)
        assert steps[-1].l.tolist() == [int(from_float(4.0, FP32))]
        assert [int(s.c[0]) for s in steps] == [0] + [ONE] * (len(steps) - 1)
    # Three keys: Y = 18, l = 3, 1/3 -> 0x3EAAAAAB, 18 * 0.333333343 = 6.00000018 -> 6.0.
    V3 = bf16([[3], [6], [9]])
    K3 = bf16([[1], [2], [3]])
    assert int(reciprocal(from_float(3.0, FP32))) == 0x3EAAAAAB
    assert fk.attend(bf16([[0]]), K3, V3, 2, chunk=2).tolist() == [[int(bf16(6.0))]]
    assert fk.attend(bf16([[0]]), K3, V3, 2, chunk=2, out_fmt="fp32").tolist() == [[0x40C00000]]


def test_output_is_rounded_once():
    # Equal scores, V = 2, 1, 3 * 2**-8: Y = 3 + 3 * 2**-8 and l = 3 exactly, 1/l -> 0x3EAAAAAB,
    # so Y / l = (1 + 2**-8) + 3.0e-8: just above a bf16 tie. Rounded once it goes up to
    # 1 + 2**-7; through fp32 first it would land on the tie (1 + 2**-8) and go to even, 1.0.
    q, K, V = bf16([[0]]), bf16([[1], [2], [3]]), bf16([[2], [1], [3 * 2.0 ** -8]])
    assert fk.attend(q, K, V, 2, chunk=4).tolist() == [[0x3F81]]
    assert fk.attend(q, K, V, 2, chunk=4, out_fmt="fp32").tolist() == [[0x3F808000]]


def test_value_accumulation_order_hand():
    # All F = 1; V column [1, a, a] with a = 0.75 * 2**-24: in position order Y stays 1 (each
    # 1 + a rounds back to 1); summing the two small values first would give 1 + 2**-23.
    a = 0.75 * 2.0 ** -24
    V = bf16([[1], [a], [a]])
    K = bf16([[1], [2], [3]])
    for chunk in (1, 2, 4):
        _, steps = fk.attend_trace(bf16([[0]]), K, V, 2, chunk=chunk, out_fmt="fp32")
        assert steps[-1].y.tolist() == [[ONE]]
    out = fk.attend(bf16([[0]]), K, V, 2, chunk=4, out_fmt="fp32")
    assert out.tolist() == [[0x3EAAAAAB]]                               # 1 * fp32(1/3)


def test_two_keys_by_hand():
    # d = 4, scale = fp32(log2 e) / 2. Key 0 scores 0, key 1 scores -2, so S'1 = -fp32(log2 e).
    q = bf16([[1, 0, 0, 0]])
    K = bf16([[0, 0, 0, 0], [-2, 0, 0, 0]])
    V = bf16([[1, 0, 2, -1], [0, 1, 2, 1]])
    f1 = int(exp2(np.uint32(0xBFB8AA3B)))                   # exp2(-1.4426950) ~ 1/e
    assert f32(f1) == pytest.approx(math.exp(-1), rel=2 ** -17.9)
    l_want = int(fadd(np.uint32(ONE), np.uint32(f1), FP32))
    for chunk in (1, 2, 8):
        out, steps = fk.attend_trace(q, K, V, 1, chunk=chunk, out_fmt="fp32")
        f = np.concatenate([s.f[0, s.valid] for s in steps]).tolist()
        assert f == [ONE, f1]
        assert [s.s[0, s.valid].tolist() for s in steps][-1][-1] == 0xBFB8AA3B
        assert steps[-1].l.tolist() == [l_want]
        assert steps[-1].m.tolist() == [0]
        # Y = V0 + F1 * V1, element by element, then times fp32(1 / l).
        y = fadd(fmul(np.uint32(f1), V[1], FP32, BF16, FP32), V[0].astype(np.uint32) << 16, FP32)
        assert np.array_equal(steps[-1].y[0], y)
        want = fmul(y, reciprocal(np.uint32(l_want)), FP32, FP32, FP32)
        assert np.array_equal(out[0], want)
    e = math.exp(-1)
    exact = [1 / (1 + e), e / (1 + e), 2, (e - 1) / (1 + e)]
    got = to_float(fk.attend(q, K, V, 1, chunk=2), BF16)[0]
    assert got[2] == 2.0                                   # Y2 = 2 l exactly
    assert np.allclose(got, exact, rtol=2 ** -8, atol=0)


def test_one_dominant_key_and_underflow():
    # Key 5 scores 64 * 64 = 4096 (S' ~ 2955); every other |S'| <= 23: their F flush to +0.
    rng = np.random.default_rng(5)
    q = bf16([[64, 0, 0, 0]])
    K = bf16(np.round(rng.uniform(-0.5, 0.5, (9, 4)) * 64) / 64)
    K[5] = bf16([64, 1, 1, 1])
    V = normal(rng, (9, 4))
    for chunk in (1, 2, 4, 16):
        out, steps = fk.attend_trace(q, K, V, 8, chunk=chunk)
        assert np.array_equal(out[0], V[5]), chunk
        assert steps[-1].l.tolist() == [ONE]
        # From the chunk holding key 5 on, every other F is +0 (exp2 below -126 flushes) ...
        hit = next(k for k, s in enumerate(steps) if s.start <= 5 < s.start + chunk)
        f = np.concatenate([s.f[0, s.valid] for s in steps[hit:]])
        assert f.tolist() == [0] * (5 - steps[hit].start) + [ONE] + [0] * 3
        # ... and what came before is wiped: C = exp2(about -2955) = +0, then C = 1.
        assert steps[hit].c.tolist() == [0]
        assert all(s.c.tolist() == [ONE] for s in steps[hit + 1:])


def test_denominator_is_a_tree_per_chunk_and_depends_on_chunk():
    # Scores 0, -1000, -17, -17 (d = 1, S' = 1.4427 S): F = 1, +0, f, f with f = 2**-24.53.
    # One chunk of 4: (1 + 0) + (f + f) = 1 + 2**-23. Chunks of 1: ((1 + 0) + f) + f = 1.
    q = bf16([[1]])
    K = bf16([[0], [-1000], [-17], [-17]])
    V = bf16([[1], [1], [1], [1]])
    _, (one,) = fk.attend_trace(q, K, V, 3, chunk=4)
    f = int(one.f[0, 2])
    assert 0.5 * 2 ** -24 < f32(f) < 2 ** -24 and one.f[0].tolist() == [ONE, 0, f, f]
    assert one.l.tolist() == [0x3F800001]
    _, steps = fk.attend_trace(q, K, V, 3, chunk=1)
    assert steps[-1].l.tolist() == [ONE]
    assert [s.c.tolist() for s in steps] == [[0], [ONE], [ONE], [ONE]]


def test_sweep_hand():
    index, valid = fk.sweep(11, 10, chunk=4, window=4)     # keys 7..10
    assert index.tolist() == [1, 2]
    assert valid.tolist() == [[False, False, False, True], [True, True, True, False]]
    index, valid = fk.sweep(5, 4, chunk=4)                  # partial last chunk
    assert index.tolist() == [0, 1] and valid.tolist() == [[True] * 4, [True, False, False, False]]
    index, valid = fk.sweep(9, 1, chunk=4)                  # rows after the position: masked
    assert index.tolist() == [0] and valid.tolist() == [[True, True, False, False]]
    index, valid = fk.sweep(100, 99, chunk=8, window=1)     # one key, chunks 0..11 skipped
    assert index.tolist() == [12] and valid[0].tolist() == [False] * 3 + [True] + [False] * 4
    for window in (10, 11, 500):                            # window >= p + 1: full attention
        a, b = fk.sweep(30, 9, chunk=4, window=window), fk.sweep(30, 9, chunk=4)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


# --- the documented order, re-implemented one scalar operation at a time --------------------------


def _key(code):
    value = f32(code)
    return (value, math.copysign(1.0, value))               # total order: -0 < +0


def _scalar_model(q, K, V, p, chunk, window, fmt):
    """Steps 1 to 10 of golden/flowkv.py, written as plain loops over scalars (slow)."""
    def mul(a, b, fa=FP32, fb=FP32, fo=FP32):
        return int(fmul(np.uint64(a), np.uint64(b), fa, fb, fo))

    def add(a, b):
        return int(fadd(np.uint32(a), np.uint32(b), FP32))

    def tree(values):
        while len(values) > 1:
            values = [add(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)] + \
                     ([values[-1]] if len(values) % 2 else [])
        return values[0]

    heads, d = q.shape
    lo = 0 if window is None else max(0, p - window + 1)
    scale = int(from_float(math.log2(math.e) / math.sqrt(d), FP32))
    out = []
    for h in range(heads):
        m, den, y = NEG_INF, 0, [0] * d
        for c in range(lo // chunk, p // chunk + 1):
            slots = [t for t in range(chunk) if lo <= c * chunk + t <= p]
            s = {t: mul(tree([mul(q[h, i], K[c * chunk + t, i], BF16, BF16)
                              for i in range(d)]), scale) for t in slots}
            m_new = max([m] + list(s.values()), key=_key)
            f = [int(exp2(np.uint32(add(s[t], m_new ^ 1 << 31)))) if t in s else 0
                 for t in range(chunk)]
            corr = int(exp2(np.uint32(add(m, m_new ^ 1 << 31))))
            den = add(mul(corr, den), tree(f))
            y = [mul(corr, v) for v in y]
            for t in slots:
                y = [add(mul(f[t], V[c * chunk + t, e], FP32, BF16), y[e]) for e in range(d)]
            m = m_new
        r = int(reciprocal(np.uint32(den)))
        out.append([mul(v, r, FP32, FP32, fmt) for v in y])
    return out


@pytest.mark.parametrize("d, heads, length, p, chunk, window, fmt, q_scale", [
    (8, 1, 5, 4, 8, None, BF16, 1),           # below one chunk
    (8, 2, 8, 7, 8, None, FP32, 1),           # exactly one chunk, GQA
    (8, 2, 23, 22, 4, None, FP32, 3),         # many chunks, partial last one
    (6, 3, 23, 17, 4, 7, FP32, 2),            # SWA, partial first chunk, rows after p, odd d
    (8, 1, 1, 0, 4, None, BF16, 1),           # L = 1
    (4, 2, 30, 29, 1, 5, FP32, 4),            # chunks of one row, window
    (8, 2, 40, 39, 8, None, FP32, 12),        # wide score range: underflowing F and C
    (12, 2, 26, 25, 6, 13, BF16, 2),          # chunk not a power of two
])
def test_matches_scalar_model(d, heads, length, p, chunk, window, fmt, q_scale):
    q, K, V = case(d * length + p, heads, length, d, q_scale)
    got = fk.attend(q, K, V, p, chunk=chunk, window=window, out_fmt=fmt)
    assert got.tolist() == _scalar_model(q, K, V, p, chunk, window, fmt)


# --- properties that must hold --------------------------------------------------------------------


def test_trace_protocol():
    q, K, V = case(11, 2, 70, 16, q_scale=3)
    out, steps = fk.attend_trace(q, K, V, 66, chunk=8, window=40, out_fmt="fp32")
    index, valid = fk.sweep(70, 66, chunk=8, window=40)
    assert [s.index for s in steps] == index.tolist()
    assert [s.start for s in steps] == (index * 8).tolist()
    assert np.array_equal(np.stack([s.valid for s in steps]), valid)
    assert np.array_equal(out, fk.attend(q, K, V, 66, chunk=8, window=40, out_fmt="fp32"))
    assert steps[0].c.tolist() == [0, 0]
    prev = [NEG_INF, NEG_INF]
    for s in steps:
        assert np.all(s.s[:, ~s.valid] == NEG_INF) and np.all(s.f[:, ~s.valid] == 0)
        for h in range(2):
            assert _key(s.m[h]) >= _key(prev[h])
            if s.m[h] == prev[h]:
                assert s.c[h] == ONE                       # unchanged maximum: C = 1 exactly
            else:
                assert ONE in s.f[h, s.valid]              # its new maximum has F = 1
            assert np.all(to_float(s.f[h, s.valid], FP32) <= 1.0)
        prev = s.m
    last = steps[-1]
    assert np.array_equal(out, fmul(last.y, reciprocal(last.l)[:, None], FP32, FP32, FP32))


def test_heads_are_independent():
    q, K, V = case(12, 3, 50, 8)
    q[2] = q[0]
    out = fk.attend(q, K, V, 49, chunk=8, window=20)
    assert np.array_equal(out[2], out[0])
    for h in range(3):
        assert np.array_equal(out[h], fk.attend(q[h:h + 1], K, V, 49, chunk=8, window=20)[0])


def test_masked_rows_never_take_part():
    q, K, V = case(13, 2, 60, 8)
    want = fk.attend(q, K, V, 40, chunk=8, window=13, out_fmt="fp32")
    K2, V2 = K.copy(), V.copy()
    outside = np.r_[0:28, 41:60]                            # before the window and after p
    K2[outside] = 0x7FC0                                    # NaN
    V2[outside] = np.where(np.arange(8) % 2, 0x7F80, 0xFF80)  # +-inf
    assert np.array_equal(fk.attend(q, K2, V2, 40, chunk=8, window=13, out_fmt="fp32"), want)


def test_nan_in_an_attended_key_gives_canonical_nan():
    q, K, V = case(14, 2, 20, 8)
    K[7, 3] = 0xFFC1                                        # a negative NaN with a payload
    assert np.all(fk.attend(q, K, V, 19, chunk=4) == 0x7FC0)
    assert np.all(fk.attend(q, K, V, 19, chunk=4, out_fmt="fp32") == 0x7FC00000)


def test_window_edge():
    q, K, V = case(15, 2, 40, 8)
    # A window of one attends only the current key: O is that value row.
    assert np.array_equal(fk.attend(q, K, V, 33, chunk=8, window=1), np.stack([V[33]] * 2))
    # A window covering 0..p is full attention, bit for bit.
    full = fk.attend(q, K, V, 33, chunk=8, out_fmt="fp32")
    for window in (34, 35, 1000):
        assert np.array_equal(fk.attend(q, K, V, 33, chunk=8, window=window, out_fmt="fp32"),
                              full)
    # One less drops key 0, which the reference confirms.
    ref = fk.attend_reference(q, K, V, 33, window=33)
    assert np.allclose(ref, fk.attend_reference(q[:, :], K[1:], V[1:], 32))
    got = to_float(fk.attend(q, K, V, 33, chunk=8, window=33, out_fmt="fp32"), FP32)
    assert np.all(np.abs(got - ref) <= fk.error_bound(q, K, V, 33, chunk=8, window=33,
                                                      out_fmt="fp32")[:, None])
    assert not np.array_equal(got, to_float(full, FP32))


@pytest.mark.parametrize("window", [None, 5])
def test_chunk_invariance_within_one_chunk(window):
    # All attended keys in chunk 0: the tree over L_c slots with +0 in the trailing slots is the
    # same tree for every L_c > p, and nothing is rescaled.
    q, K, V = case(16, 2, 30, 16)
    want = fk.attend(q, K, V, 12, chunk=13, window=window, out_fmt="fp32")
    for chunk in (16, 17, 31, 64, 1000):
        assert np.array_equal(fk.attend(q, K, V, 12, chunk=chunk, window=window,
                                        out_fmt="fp32"), want), chunk


@pytest.mark.parametrize("window", [None, 11])
def test_chunk_invariance_for_equal_scores(window):
    # Equal scores: F = 1 and C = 1 after the first chunk, sums of ones are exact.
    _, K, V = case(17, 1, 40, 8)
    q = np.zeros((2, 8), np.uint16)
    want = fk.attend(q, K, V, 37, chunk=1, window=window, out_fmt="fp32")
    for chunk in (2, 3, 8, 16, 64):
        assert np.array_equal(fk.attend(q, K, V, 37, chunk=chunk, window=window,
                                        out_fmt="fp32"), want), chunk


def test_numerators_invariant_when_the_first_key_is_the_maximum():
    # m is fixed from the first chunk on, so F and Y do not depend on L_c; only the order of the
    # denominator's additions does.
    q, K, V = case(18, 1, 50, 8)
    K[0] = q[0]                                             # q . q: far above every q . k
    ref_f = ref_y = None
    for chunk in (1, 4, 7, 16, 64):
        _, steps = fk.attend_trace(q, K, V, 49, chunk=chunk, out_fmt="fp32")
        f = np.concatenate([s.f[:, s.valid] for s in steps], axis=1)
        assert all(s.m.tolist() == steps[0].m.tolist() for s in steps)
        if ref_f is None:
            ref_f, ref_y = f, steps[-1].y
        assert np.array_equal(f, ref_f) and np.array_equal(steps[-1].y, ref_y), chunk


def test_results_may_differ_with_chunk_size():
    q, K, V = case(19, 2, 200, 16, q_scale=2)
    outs = {chunk: fk.attend(q, K, V, 199, chunk=chunk, out_fmt="fp32") for chunk in (1, 8, 64)}
    assert not np.array_equal(outs[1], outs[8]) or not np.array_equal(outs[8], outs[64])


# --- the float64 reference and the error bound ----------------------------------------------------


def test_reference_hand():
    q = bf16([[1, 0]])
    K = bf16([[0, 0], [2, 0], [4, 5]])
    V = bf16([[1, 2], [3, 4], [100, 100]])
    w = np.exp([0, 2 / math.sqrt(2)])
    want = (w[0] * np.array([1, 2]) + w[1] * np.array([3, 4])) / w.sum()
    assert np.allclose(fk.attend_reference(q, K, V, 1), want, rtol=1e-15)
    assert np.allclose(fk.attend_reference(q, K, V, 2, window=1), [[100, 100]], rtol=0)


BOUND_CASES = [  # id, d, heads, length, chunk, window, q_scale
    ("L=1", 64, 1, 1, 16, None, 1),
    ("below one chunk", 64, 2, 10, 16, None, 1),
    ("exactly one chunk", 64, 1, 16, 16, None, 1),
    ("many chunks, partial last", 64, 2, 300, 16, None, 1),
    ("SWA", 64, 2, 300, 16, 50, 1),
    ("SWA, window edge mid-chunk", 64, 1, 300, 16, 17, 1),
    ("Gemma3-4B shape, SWA", 256, 2, 1100, 64, 1024, 1),
    ("Gemma3-1B group", 256, 4, 700, 128, 512, 1),
    ("chunks of one row", 32, 2, 200, 1, None, 1),
    ("large score range", 64, 2, 300, 16, None, 32),
]


@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
@pytest.mark.parametrize("name, d, heads, length, chunk, window, q_scale", BOUND_CASES,
                         ids=[c[0] for c in BOUND_CASES])
def test_within_bound_of_reference(name, d, heads, length, chunk, window, q_scale, fmt):
    worst = 0.0
    for seed in range(3):
        q, K, V = case(seed, heads, length, d, q_scale)
        p = length - 1
        out = fk.attend(q, K, V, p, chunk=chunk, window=window, out_fmt=fmt)
        got = to_float(out, float_format(fmt))
        err = np.abs(got - fk.attend_reference(q, K, V, p, window)).max(axis=1)
        bound = fk.error_bound(q, K, V, p, chunk=chunk, window=window, out_fmt=fmt)
        assert np.all(err <= bound), (err, bound)
        lo = 0 if window is None else max(0, p - window + 1)
        vmax = float(np.abs(to_float(V[lo:], BF16)).max())
        worst = max(worst, float(err.max()) / vmax)
        if chunk > 1:
            assert np.all(bound <= 0.01 * vmax)            # at least as tight as 1 % of max|V|
    print(f"{name} {fmt}: worst |O - ref| = {worst:.3e} max|V|")


def test_large_score_range_underflows():
    q, K, V = case(1, 2, 300, 64, q_scale=32)
    _, steps = fk.attend_trace(q, K, V, 299, chunk=16)
    f = np.concatenate([s.f[:, s.valid] for s in steps], axis=1)
    assert np.count_nonzero(f == 0) > 100                   # exp2 flushed to +0, no NaN
    assert not np.any(np.isnan(to_float(f, FP32)))


def test_bound_catches_a_wrong_scale(monkeypatch):
    # A plausible bug: forgetting log2(e) in the score scale (natural-log scores fed to exp2).
    monkeypatch.setattr(fk, "score_scale", lambda d: np.uint32(from_float(d ** -0.5, FP32)))
    q, K, V = case(2, 2, 100, 64)
    got = to_float(fk.attend(q, K, V, 99, chunk=16), BF16)
    monkeypatch.undo()
    err = np.abs(got - fk.attend_reference(q, K, V, 99)).max(axis=1)
    assert np.any(err > fk.error_bound(q, K, V, 99, chunk=16))


# --- errors ---------------------------------------------------------------------------------------


def _ok():
    return case(0, 2, 5, 4)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"window": 0}, ValueError, r"^Window must be between 1 and 16777216, not 0$"),
    ({"window": 2.5}, TypeError, r"^Window must be an integer between 1 and 16777216, not 2\.5$"),
    ({"position": 5}, ValueError, r"^Position must be between 0 and 4, not 5$"),
    ({"position": -1}, ValueError, r"^Position must be between 0 and 4, not -1$"),
    ({"position": 2.0}, TypeError, r"^Position must be an integer between 0 and 4, not 2\.0$"),
    ({"chunk": 0}, ValueError, r"^Chunk length must be between 1 and 16777216, not 0$"),
    ({"lanes": 12}, ValueError, r"^Lane count must be a power of two between 1 and 64, not 12$"),
    ({"lanes": 8}, ValueError, r"^Head dimension must be a multiple of the lane count 8, not 4$"),
    ({"out_fmt": "fp16"}, ValueError, r"^Output format must be bf16 or fp32, not fp16$"),
    ({"out_fmt": "int8"}, ValueError, r"^Float format must be one of bf16, fp16, fp32"),
])
def test_parameter_errors(kwargs, error, match):
    q, K, V = _ok()
    args = {"position": 4, "chunk": 2, **kwargs}
    position = args.pop("position")
    with pytest.raises(error, match=match):
        fk.attend(q, K, V, position, **args)


def test_operand_errors():
    q, K, V = _ok()
    with pytest.raises(TypeError, match=r"^Query must be BF16 bit patterns \(an integer array\), "
                                        r"not float64$"):
        fk.attend(q.astype(np.float64), K, V, 4, chunk=2)
    with pytest.raises(ValueError, match=r"^Query must be a non-empty \(heads, head dimension\) "
                                         r"array, not shape \(4,\)$"):
        fk.attend(q[0], K, V, 4, chunk=2)
    with pytest.raises(ValueError, match=r"^Keys must be a non-empty \(length, head dimension\) "
                                         r"array, not shape \(0, 4\)$"):
        fk.attend(q, K[:0], V[:0], 0, chunk=2)
    with pytest.raises(ValueError, match=r"^Key head dimension must be 4 \(the query's\), not 8$"):
        fk.attend(q, np.zeros((5, 8), np.uint16), V, 4, chunk=2)
    with pytest.raises(ValueError, match=r"^Values must have the keys' shape \(5, 4\), "
                                         r"not \(6, 4\)$"):
        fk.attend(q, K, np.zeros((6, 4), np.uint16), 4, chunk=2)
    with pytest.raises(ValueError, match=r"^Values must be 16-bit codes between 0 and 65535, "
                                         r"not 70000$"):
        fk.attend(q, K, np.full((5, 4), 70000), 4, chunk=2)


def test_other_entry_points_check_too():
    q, K, V = _ok()
    with pytest.raises(ValueError, match=r"^Position must be between 0 and 4, not 5$"):
        fk.attend_reference(q, K, V, 5)
    with pytest.raises(ValueError, match=r"^Window must be between 1 and 16777216, not 0$"):
        fk.attend_reference(q, K, V, 4, window=0)
    with pytest.raises(ValueError, match=r"^Window must be between 1 and 16777216, not 0$"):
        fk.error_bound(q, K, V, 4, chunk=2, window=0)
    with pytest.raises(ValueError, match=r"^Output format must be bf16 or fp32, not fp16$"):
        fk.error_bound(q, K, V, 4, chunk=2, out_fmt="fp16")
    with pytest.raises(ValueError, match=r"^Window must be between 1 and 16777216, not 0$"):
        fk.attend_trace(q, K, V, 4, chunk=2, window=0)
    with pytest.raises(ValueError, match=r"^Sequence length must be between 1 and 16777216, "
                                         r"not 0$"):
        fk.sweep(0, 0, chunk=1)
    with pytest.raises(ValueError, match=r"^Head dimension must be between 1 and 16777216, "
                                         r"not 0$"):
        fk.score_scale(0)
    with pytest.raises(ValueError, match=r"^Tree sum needs at least one value, not 0$"):
        fk.tree_sum(np.zeros((3, 0), np.uint32))
    # NumPy integers are accepted where Python integers are.
    assert np.array_equal(fk.attend(q, K, V, np.int64(4), chunk=np.int32(2), lanes=np.int64(4),
                                    window=np.int64(3)), fk.attend(q, K, V, 4, chunk=2, window=3))
