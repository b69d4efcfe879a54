"""The VE's quantizer (hdl/rdxe/quant.py) in Amaranth's simulator against golden.rdxe.dxe:
``quantize`` run as the DXE runs it (a pass for ``M``, ``k = reciprocal(M)`` in the shared
Reciprocal's RTL, a pass for the codes) and ``quantize_static`` with per-channel factors, on
random tokens with zeros, subnormals, the largest values, infinities, NaNs and the rounding's
ties, a zero token, and layer 2's real residual; idle inputs and back-pressure; the latency at
full rate; the lane count's message."""

from __future__ import annotations

import numpy as np
import pytest

from golden.rdxe import dxe as D
from golden.rdxe.act import act_scale
from hdl.arith.format import FP32
from hdl.arith.recip import Reciprocal
from hdl.rdxe.act import GatedActivation
from hdl.rdxe.quant import QuantCore, Quantizer
from tests.pipeline_sim import run_pipeline
from tests.stream_sim import run_streams, shared


LANES = 4
_SIGN = np.uint32(1 << 31)
_INF = np.uint32(FP32.infinity(0))
_NAN = np.uint32(FP32.infinity(0) | 1 << 22)


def _beats(x, k, lanes: int) -> list[dict]:
    """The beats of tokens ``x`` ``(T, N)`` with factors ``k`` ``(T, N)`` (fp32 codes)."""
    return [{"x": x[t, b:b + lanes].tolist(), "k": k[t, b:b + lanes].tolist(),
             "first": int(b == 0)}
            for t in range(x.shape[0]) for b in range(0, x.shape[1], lanes)]


def _expected(x, k, lanes: int) -> list[dict]:
    """Per beat: ``quantize_static`` with the beat's factors, and ``M`` of the token's beats so
    far (``act_scale`` of the prefix)."""
    codes = D.quantize_static(x, k)
    return [{"codes": [int(c) & 0xFF for c in codes[t, b:b + lanes]],
             "max": int(act_scale(x[t, :b + lanes])[0])}
            for t in range(x.shape[0]) for b in range(0, x.shape[1], lanes)]


#: The quantizer's units by name: the unit of ``lanes`` and its input. The activation unit with
#: ``quantizer`` is the DXE controller's quantizer (one core for both).
UNITS = {"quantizer": lambda lanes: (shared(Quantizer, lanes), "i"),
         "activation": lambda lanes: (shared(GatedActivation, lanes, quantizer=True), "q")}


def _run(x, k, *, seed: int, lanes: int = LANES, idle: float = 0.3, stall: float = 0.3,
         unit: str = "quantizer"):
    """Run one pass of tokens ``x`` with factors ``k`` (broadcast to ``x``'s shape) through
    ``unit`` (a key of :data:`UNITS`), check every result against the golden, and return
    ``(results, cycles)``."""
    k = np.broadcast_to(np.asarray(k, np.uint32), x.shape)
    beats = _beats(x, k, lanes)
    component, port = UNITS[unit](lanes)
    got, cycles = run_streams(component, {port: beats}, {"o": ["codes", "max"]},
                              done=lambda r: len(r["o"]) == len(beats), idle=idle,
                              stall=stall, seed=seed)
    for result in got["o"]:                        # the simulator reads signed lanes
        result["codes"] = [v & 0xFF for v in result["codes"]]
    per_token = x.shape[1] // lanes
    for n, (g, w) in enumerate(zip(got["o"], _expected(x, k, lanes))):
        assert g == w, f"beat {n} (token {n // per_token}): expected {w}, got {g}"
    return got["o"], cycles


def _quantize_in_rtl(x, *, seed: int, lanes: int = LANES, unit: str = "quantizer") \
        -> D.Quantized:
    """``quantize(x)`` as the DXE runs it: a first pass (random factors: its codes are dropped)
    for ``M`` at each token's last beat, ``k = reciprocal(M)`` in the shared Reciprocal's RTL,
    a second pass with ``k`` in every lane."""
    rng = np.random.default_rng(seed)
    first_k = rng.integers(0, 1 << 32, x.shape, dtype=np.uint64).astype(np.uint32)
    results, _ = _run(x, first_k, seed=seed, lanes=lanes, unit=unit)
    per_token = x.shape[1] // lanes
    top = np.array([r["max"] for r in results[per_token - 1::per_token]], np.uint32)
    recip = run_pipeline(Reciprocal(), [{"x": int(m)} for m in top], seed=seed)
    k = np.array(recip.outputs, np.uint32)
    results, _ = _run(x, k[:, None], seed=seed + 1, lanes=lanes, unit=unit)
    codes = np.array([r["codes"] for r in results], np.int64).reshape(x.shape)
    return D.Quantized(np.where(codes > 127, codes - 256, codes), top, k)


def _check_quantize(x, *, seed: int, lanes: int = LANES, unit: str = "quantizer"):
    got, want = _quantize_in_rtl(x, seed=seed, lanes=lanes, unit=unit), D.quantize(x)
    assert np.array_equal(got.top, want.top), (got.top, want.top)
    assert np.array_equal(got.k, want.k), (got.k, want.k)
    assert np.array_equal(got.codes, want.codes)
    return got


def _corner_tokens(rng) -> np.ndarray:
    """Tokens of ``4 LANES`` channels: random values over a wide range with zeros (both signs)
    and subnormals among them; an all-zero token (``M = 0``: ``k = +inf``, every code 0); the
    largest normals (``k`` flushes to 0: codes 0, as the golden says); only subnormals; the
    rounding's tie ``127 * 0.5 = 63.5`` (to 64) with its neighbours, ``M = 1``."""
    n = 4 * LANES
    wide = D.fp32(rng.standard_normal((2, n)) * np.exp2(rng.integers(-100, 100, (2, 1))))
    wide[0, [1, 6]] = [0, _SIGN]
    wide[1, [2, 9]] = [3, _SIGN | 0x7FFFFF]                   # subnormals read as zero
    big = np.full(n, FP32.max_normal, np.uint32) ^ (_SIGN * rng.integers(0, 2, n, np.uint32))
    subnormal = rng.integers(1, 1 << 23, n).astype(np.uint32)
    half = D.fp32([0.5, -0.5, 1.0, 0.5 + 2.0 ** -24, 0.5 - 2.0 ** -25, -1.0, 0.25, 0.75]
                  * (n // 8))                                 # fp32's neighbours of 0.5
    return np.vstack([wide, np.zeros(n, np.uint32), big, subnormal, half])


@pytest.mark.parametrize("unit", UNITS)
def test_quantize_corner_tokens(unit):
    q = _check_quantize(_corner_tokens(np.random.default_rng(7)), seed=1, unit=unit)
    assert q.k[2] == _INF and not q.codes[2:5].any()
    assert q.codes[5, :8].tolist() == [64, -64, 127, 64, 63, -127, 32, 95]


@pytest.mark.parametrize("unit", UNITS)
def test_quantize_static_corners(unit):
    """Per-channel factors (``static_inverse`` of random scales, and +0, +inf, a power of two
    making ``x k = 0.5``) on values with infinities, NaNs, the largest normals (the product
    overflows: saturated), zeros and subnormals."""
    rng = np.random.default_rng(8)
    n, tokens = 4 * LANES, 6
    x = D.fp32(rng.standard_normal((tokens, n)) * np.exp2(rng.integers(-8, 8, (tokens, n))))
    x[0, :8] = [_INF, _INF | _SIGN, _NAN, FP32.max_normal, FP32.max_normal | _SIGN, 0, 5,
                D.fp32(4.0)]
    x[1, :5] = D.fp32([4.0, -4.0, 12.0, -20.0, 3.0])
    k = D.static_inverse(rng.uniform(1e-3, 0.2, n))
    k[:5] = D.fp32([2.0 ** -3, 2.0 ** -3, 0.0, np.inf, 4.0])
    _run(x, k, seed=2, unit=unit)
    # The golden by hand: x k = +-0.5 (the tie, to +-64), 12 x 0, -20 x inf, 3 x 4; inf, -inf,
    # NaN x 0, the largest normal x inf and (x 4) its overflow.
    assert D.quantize_static(x[1, :5], k[:5]).tolist() == [64, -64, 0, -127, 127]
    assert D.quantize_static(x[0, :5], k[:5]).tolist() == [127, -127, 0, 127, -127]


@pytest.mark.parametrize("lanes", [1, LANES])
def test_quantize_random_tokens(lanes):
    """Random tokens, a tenth of the values zeros; one lane (no tree for a beat's maximum) and
    four."""
    rng = np.random.default_rng(9)
    x = D.fp32(rng.standard_normal((6, 4 * LANES)) * np.exp2(rng.integers(-30, 30, (6, 1))))
    x[rng.random(x.shape) < 0.1] = 0
    _check_quantize(x, seed=3, lanes=lanes)


@pytest.mark.parametrize("unit", UNITS)
def test_full_rate_latency(unit):
    """Without idle beats or back-pressure: one beat a cycle, the last result ``latency`` plus
    the queue's two cycles after the last beat (more beats than the quantizer's queue has
    places; the activation unit's has more)."""
    tokens = (Quantizer.latency_of(LANES) + 8) // 2
    x = D.fp32(np.random.default_rng(10).standard_normal((tokens, 2 * LANES)))
    _, cycles = _run(x, D.quantize(x).k[:, None], seed=4, idle=0.0, stall=0.0, unit=unit)
    assert cycles == x.size // LANES + Quantizer.latency_of(LANES) + 2, cycles
    # 10 before session 25, 11 before session 36's landed fp32 pieces.
    assert Quantizer.latency_of(LANES) == QuantCore.latency_of(LANES) == 12


def test_real_residual(layer_inputs):
    """Three tokens of the residual entering SmolLM2's layer 2 (576 channels), 16 lanes."""
    h = D.codes_of(layer_inputs[0][:3])
    q = _check_quantize(h, seed=5, lanes=16)
    assert np.abs(q.codes).max(axis=-1).tolist() == [127] * 3


@pytest.mark.parametrize("unit", [Quantizer, QuantCore, Quantizer.latency_of])
def test_lane_count_message(unit):
    for lanes in (12, 0, 128):
        with pytest.raises(ValueError, match="Quantizer lane count must be a power of two "
                                             f"between 1 and 64, not {lanes}"):
            unit(lanes)
    with pytest.raises(TypeError, match="Quantizer lane count must be an integer power of two "
                                        "between 1 and 64, not 4.0"):
        unit(4.0)
