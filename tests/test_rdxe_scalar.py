"""The DXE controller's scalar path (hdl/rdxe/scalar.py) in Amaranth's simulator against
golden.arith.func.reciprocal and golden.rdxe.dxe's rms_eps and score_factor: each op on random
operands and corners (M = 0, subnormal and infinite M, huge and tiny k, the epsilon's overflow,
c * M_q overflowing and flushing to the RC factor's saturation and flush, the RC rounding's ties
and carry, its shift's ends); a random mix with idle inputs and back-pressure; the throughput
and latency at full rate; the parameter's messages; a real layer's M, k and constants."""

from __future__ import annotations

import numpy as np
import pytest

from golden.arith.func import reciprocal
from golden.rdxe import dxe as D
from golden.rdxe.params import P_ONE, VacConfig
from hdl.arith.format import FP32
from hdl.rdxe.scalar import ScalarOp, ScalarUnit
from hdl.rdxe.spec import VeConfig, rc_layout
from tests.stream_sim import run_streams, shared


CFG = VeConfig()
_SIGN = np.uint32(1 << 31)
_INF = np.uint32(FP32.infinity(0))
_NAN = np.uint32(FP32.infinity(0) | 1 << 22)


def _pack(rc, cfg: VeConfig) -> list[int]:
    """``y`` words of RC factors: ``m`` and ``shift`` where ``rc_layout`` puts them."""
    offset = rc_layout(cfg)["shift"].offset
    return [int(m) | int(s) << offset for m, s in zip(np.ravel(rc.m), np.ravel(rc.shift))]


def recip(x) -> tuple[list, list]:
    """Beats of ``RECIP`` on fp32 codes ``x`` and their golden results."""
    x = np.ravel(np.asarray(x, np.uint32))
    return ([{"op": ScalarOp.RECIP.value, "x": int(v), "c": 0} for v in x],
            [int(v) for v in reciprocal(x)])


def rms_eps(k, eps) -> tuple[list, list]:
    """Beats of ``RMS_EPS`` on fp32 codes ``k`` with float64 epsilons ``eps`` (broadcast), the
    constant ``c = fp32(127**2 eps)`` of each, and the golden results."""
    k = np.ravel(np.asarray(k, np.uint32))
    eps = np.broadcast_to(np.asarray(eps, np.float64), k.shape)
    beats = [{"op": ScalarOp.RMS_EPS.value, "x": int(v), "c": int(D.fp32(P_ONE ** 2 * e))}
             for v, e in zip(k, eps)]
    return beats, [int(D.rms_eps(v, e)) for v, e in zip(k, eps)]


def score(top, c, cfg: VeConfig = CFG) -> tuple[list, list]:
    """Beats of ``SCORE_FACTOR`` on fp32 codes ``M_q`` (``top``) and constants ``c`` (broadcast)
    and their golden ``(m, shift)`` packed as ``y``."""
    top = np.ravel(np.asarray(top, np.uint32))
    c = np.broadcast_to(np.asarray(c, np.uint32), top.shape)
    rc = D.score_factor(top, c, VacConfig(rc_bits=cfg.rc_bits))
    return ([{"op": ScalarOp.SCORE_FACTOR.value, "x": int(t), "c": int(v)}
             for t, v in zip(top, c)], _pack(rc, cfg))


def _run(beats, want, *, cfg: VeConfig = CFG, seed: int, idle: float = 0.3,
         stall: float = 0.3, accepted: dict | None = None) -> int:
    """Run ``beats`` through the unit, check every result against ``want`` and return the
    cycles."""
    got, cycles = run_streams(shared(ScalarUnit, cfg), {"i": beats}, {"o": ["y"]},
                              done=lambda r: len(r["o"]) == len(beats), idle=idle,
                              stall=stall, seed=seed, accepted_at=accepted)
    for n, (b, g, w) in enumerate(zip(beats, [r["y"] for r in got["o"]], want)):
        assert g == w, (f"beat {n} ({ScalarOp(b['op']).name}, x {b['x']:#010x}, c "
                        f"{b['c']:#010x}): expected {w:#010x}, got {g:#010x}")
    return cycles


def _wide(rng, n: int, spread: int = 120) -> np.ndarray:
    """Random positive fp32 codes over ``2**-spread`` to ``2**spread``."""
    return D.fp32(np.abs(rng.standard_normal(n)) * np.exp2(rng.integers(-spread, spread, n)))


def _recip_case(rng):
    """M = +-0, subnormals (read as zero: +inf), +-inf (+-0), 2**126 (exact) and above it
    (flushed), the largest normal, the smallest normal (its reciprocal 2**126), 1, NaN, a
    power of two, then random M over 2**+-120 with some negative."""
    corners = np.array([0, _SIGN, 1, 0x7FFFFF, _INF, _INF | _SIGN, D.fp32(2.0 ** 126),
                        D.fp32(2.0 ** 126 * 1.5), FP32.max_normal, 0x00800000,
                        D.fp32(1.0), _NAN, D.fp32(2.0 ** -40)], np.uint32)
    x = _wide(rng, 40)
    x[::7] |= _SIGN
    return recip(np.concatenate([corners, x]))


def _rms_eps_case(rng):
    """k = +inf (+0, with eps 0 too: NaN product), 0, a subnormal, -inf (+inf: saturated), NaN,
    2**100 (the product overflows: the largest normal), 2**-100 (flushes), k = 0.5 with
    127**2 eps = 1 (0.25); eps so large that ``e k`` alone overflows; then random k and eps
    over wide ranges, a few k negative."""
    k = D.fp32([np.inf, np.inf, 0.0, 0.0, np.inf, np.nan, 2.0 ** 100, 2.0 ** -100, 0.5, 2.0,
                2.0 ** 60, 2.0 ** 64])
    k[3], k[4] = 0x7FFFFF, _INF | _SIGN
    eps = [1e-5, 0.0, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5, 1 / 16129, 2e34, 1e-6, 1e-6]
    rk = _wide(rng, 40, spread=70)
    rk[::9] |= _SIGN
    reps = np.exp2(rng.uniform(-40, 10, 40))
    beats, want = rms_eps(np.concatenate([k, rk]), np.concatenate([eps, reps]))
    assert want[:2] == [0, 0] and want[6] == FP32.max_normal == want[9]
    assert want[4] == FP32.max_normal and want[8] == D.fp32(0.25)
    return beats, want


def _ties(b: int) -> np.ndarray:
    """Significands ``[1, 2)`` whose rounding to ``b`` bits is a tie: kept LSB even (down), odd
    (up), and all ones (up, carrying into the exponent), and their fp32 neighbours."""
    drop = FP32.precision - b
    half = 1 << (drop - 1)
    sigs = [1 << 23 | 2 << drop | half, 1 << 23 | 3 << drop | half, (1 << 24) - (1 << drop) | half,
            1 << 23 | 3 << drop | half - 1, 1 << 23 | 2 << drop | half + 1]
    return np.ldexp(np.array(sigs, np.float64), -23)


def _score_case(rng, cfg: VeConfig = CFG):
    """M_q = 0 and subnormal (flush: (0, 63)), +inf and c M_q overflowing to +inf (saturated),
    c M_q flushing to 0; values at the shift's ends (2**(b-1), shift 0; 2**b, saturated;
    2**(b-64), shift 63; 2**(b-65), flushed) and the rounding's ties with c = 1 and 1/2; then
    random M_q and c."""
    b = cfg.rc_mant_bits
    top = D.fp32([0.0, 2.0 ** -140, np.inf, 2.0 ** 100, 2.0 ** -100, 2.0 ** (b - 1), 2.0 ** b,
                  2.0 ** (b - 64), 2.0 ** (b - 65), 2.0 ** b * (1 - 2.0 ** -24)])
    c = D.fp32([0.375, 1.0, 1.0, 2.0 ** 100, 2.0 ** -100, 1.0, 1.0, 1.0, 1.0, 1.0])
    ties = D.fp32(np.concatenate([_ties(b) * 2.0 ** (b - 10), _ties(b) * 2.0 ** (b - 9)]))
    tie_c = D.fp32(np.repeat([1.0, 0.5], ties.size // 2))
    rtop, rc = _wide(rng, 40, spread=60), _wide(rng, 40, spread=60)
    beats, want = score(np.concatenate([top, ties, rtop]), np.concatenate([c, tie_c, rc]), cfg)
    flush, full = 63 << rc_layout(cfg)["shift"].offset, (1 << b) - 1
    assert want[:5] == [flush, flush, full, full, flush]
    assert want[5] == 1 << (b - 1) and want[6] == full and want[8] == flush
    return beats, want


CASES = {"recip": _recip_case, "rms_eps": _rms_eps_case, "score_factor": _score_case}


@pytest.mark.parametrize("op", CASES)
def test_op_bit_exact(op):
    """Each op on its corners and random operands, 30 % idle inputs, 30 % back-pressure."""
    rng = np.random.default_rng(list(CASES).index(op) + 1)
    _run(*CASES[op](rng), seed=len(op))


def test_score_factor_narrow():
    """``SCORE_FACTOR`` at the narrowest RC factor (``rc_bits`` 16: 10 significand bits), where
    the rounding drops 14 bits."""
    cfg = VeConfig(rc_bits=16)
    _run(*_score_case(np.random.default_rng(4), cfg), cfg=cfg, seed=4)


def test_mixed_ops_with_idle_and_back_pressure():
    rng = np.random.default_rng(5)
    cases = [CASES[op](rng) for op in CASES]
    beats = [b for case in cases for b in case[0]]
    want = [w for case in cases for w in case[1]]
    order = rng.permutation(len(beats))
    _run([beats[k] for k in order], [want[k] for k in order], seed=5, idle=0.4, stall=0.5)


def _taken(ops, mul: int) -> list[int]:
    """The cycles in which beats of ``ops`` are taken when each is offered as early as it can
    be and ``o`` is always ready: every cycle but the one ``mul`` after an ``RMS_EPS`` beat."""
    cycle, busy, taken = 0, set(), []
    for op in ops:
        while cycle in busy:
            cycle += 1
        taken.append(cycle)
        if op == ScalarOp.RMS_EPS.value:
            busy.add(cycle + mul)
        cycle += 1
    return taken


def test_full_rate_latency():
    """No idle input, no back-pressure, more beats than the result queue has places: a beat a
    cycle but the second pass's, each result ``latency_of`` plus the queue's two cycles after
    its beat; RMS_EPS alone runs at half rate (eight beats, then eight second passes: the
    multiplier's operand register and its seven stages)."""
    lat = ScalarUnit.latencies_of(CFG)
    latency = ScalarUnit.latency_of(CFG)
    # The landed reciprocal (20 cycles; 12 on six blocks before session 31) sets the latency;
    # the multiplies' path is 16 (14 before session 39's operand register, 12 before session
    # 36's landed fp32 pieces).
    assert lat["pass"] == lat["mul"] + 1 == 8
    assert latency == lat["recip"] == 20 and max(2 * lat["pass"], lat["pass"] + lat["to_rc"]) == 16
    rng = np.random.default_rng(6)
    pool = [CASES[op](rng) for op in CASES]
    for pick in ((0, 2), (0, 1, 2), (1,)):
        beats = [b for p in pick for b in pool[p][0][:32]]
        want = [w for p in pick for w in pool[p][1][:32]]
        order = rng.permutation(len(beats))
        beats, want = [beats[k] for k in order], [want[k] for k in order]
        accepted: dict = {}
        cycles = _run(beats, want, seed=6, idle=0.0, stall=0.0, accepted=accepted)
        taken = _taken([b["op"] for b in beats], lat["pass"])
        assert accepted["i"] == taken, (pick, accepted["i"], taken)
        assert cycles == taken[-1] + 1 + latency + 2, (pick, cycles)
    assert taken[:17] == [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23, 32]


def test_parameter_messages():
    for bad in (16, "small", None):
        with pytest.raises(TypeError, match=f"Scalar unit configuration must be a VeConfig, "
                                            f"not {bad!r}$"):
            ScalarUnit(bad)
    with pytest.raises(TypeError, match="Scalar unit configuration must be a VeConfig, not 4$"):
        ScalarUnit.latency_of(4)
    with pytest.raises(ValueError, match="RC factor width must be between 16 and 30, not 31$"):
        ScalarUnit(VeConfig(rc_bits=31))


@pytest.fixture(scope="module")
def layer_constants(smol):
    """Layer 2's fp32 score constant from the ``rdxe-dxe`` back-end (``_dxe_constants``,
    calibrated on 4 tokens: enough for real magnitudes, cheaper than the default 256), its tile
    parameters and the model's RMSNorm epsilon."""
    from sim.llm.backends.rdxe import RDXE
    back = RDXE(smol, calibration=list(range(1000, 1004)), glu="ve", host="dxe")
    return back.tables(2)["dxe"]["score"], back.params, smol.config.rms_eps


def test_real_layer(layer_inputs, layer_constants):
    """Layer 2 of SmolLM2 on 8 tokens: ``k = reciprocal(M)`` of each token's residual, RMSNorm's
    epsilon from that ``k`` and the model's ``rms_eps``, and the score PPU's factor from ``M_q``
    of the token's Q after RoPE (all heads, as ``score_codes``) and the back-end's constant;
    the RTL's ``k`` fed back as the next beats' operand, as the controller does."""
    from sim.llm.model import rope_tables
    h, q, _, c = layer_inputs
    const, params, eps = layer_constants
    cfg = params.ve_config()
    xq = D.quantize(D.codes_of(h))
    cos, sin = rope_tables(np.arange(8), c.rope_base, c.head_dim, np.float64)
    qz = D.quantize(D.rope(D.codes_of(q), *D.rope_codes(cos, sin)).reshape(8, -1))
    beats, want = recip(xq.top)
    assert want == xq.k.tolist()
    got, _ = run_streams(shared(ScalarUnit, cfg), {"i": beats}, {"o": ["y"]},
                         done=lambda r: len(r["o"]) == len(beats), seed=7)
    k = np.array([r["y"] for r in got["o"]], np.uint32)
    assert k.tolist() == want
    e_beats, e_want = rms_eps(k, eps)
    s_beats, s_want = score(qz.top, const, cfg)
    assert s_want == _pack(D.score_factor(qz.top, const, params), cfg)
    _run(e_beats + s_beats, e_want + s_want, cfg=cfg, seed=8)
    # Real values are inside both formats' ranges: no special case decided them.
    rc, b = D.score_factor(qz.top, const, params), cfg.rc_mant_bits
    assert np.all((rc.m >= 1 << (b - 1)) & (rc.shift > 0) & (rc.shift < 63)), rc
    assert np.all((np.array(e_want) > 0) & (np.array(e_want) < FP32.max_normal)), e_want
