"""The VE's activation unit (hdl/rdxe/act.py) in Amaranth's simulator against golden.rdxe.act:
tokens of random codes and of every corner gate/up pair, both passes (any ``k``, then ``k =
reciprocal(M)``), with idle inputs and back-pressure; the latency at full rate; the lane
count's message."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from golden.arith.float import from_float
from golden.rdxe.act import BETA_GELU, BETA_SILU, act, act_codes, act_constants
from hdl.arith.format import FP32
from hdl.rdxe.act import GatedActivation
from hdl.rdxe.quant import QuantCore
from tests.stream_sim import run_streams, shared
from tests.test_rdxe_quant import _beats as _quant_beats
from tests.test_rdxe_quant import _expected as _quant_expected

LANES = 4
#: Corner codes of a gate or up input: both ends, around zero, and one below each end.
CORNERS = (-128, -127, -126, -1, 0, 1, 126, 127)


def _beats(x, y, a, c, k) -> list[dict]:
    """The beats of tokens ``x``, ``y`` ``(T, N)`` with per-token factors ``k`` (uint32)."""
    beats = []
    for t in range(x.shape[0]):
        for b in range(0, x.shape[1], LANES):
            s = slice(b, b + LANES)
            beats.append({"x": x[t, s].tolist(), "y": y[t, s].tolist(),
                          "a": a[s].tolist(), "c": c[s].tolist(), "k": int(k[t]),
                          "first": int(b == 0)})
    return beats


def _expected(x, y, a, c, k) -> list[dict]:
    """Per beat: the golden codes with the beat's ``k``, and the running maximum of ``|v|``."""
    trace = act(x, y, a, c)
    codes = act_codes(trace.values, k)
    mags = (trace.values & np.uint32(0x7FFFFFFF)).astype(np.int64)
    out = []
    for t in range(x.shape[0]):
        for b in range(0, x.shape[1], LANES):
            out.append({"codes": [int(v) & 0xFF for v in codes[t, b:b + LANES]],
                        "max": int(mags[t, :b + LANES].max())})
    return out


def _run(x, y, a, c, k, *, seed: int, idle: float = 0.3, stall: float = 0.3):
    unit = shared(GatedActivation, LANES)
    beats = _beats(x, y, a, c, k)
    got, cycles = run_streams(unit, {"i": beats}, {"o": ["codes", "max"]},
                              done=lambda r: len(r["o"]) == len(beats), idle=idle,
                              stall=stall, seed=seed)
    for got_codes in got["o"]:                     # the simulator reads signed lanes
        got_codes["codes"] = [v & 0xFF for v in got_codes["codes"]]
    want = _expected(x, y, a, c, k)
    for n, (g, w) in enumerate(zip(got["o"], want)):
        assert g == w, f"beat {n} (token {n // (x.shape[1] // LANES)}): expected {w}, got {g}"
    return cycles


def _second_pass_k(x, y, a, c) -> np.ndarray:
    return act(x, y, a, c).k


@pytest.mark.parametrize("beta", [BETA_SILU, BETA_GELU])
def test_random_tokens_both_passes(beta):
    rng = np.random.default_rng(11)
    channels, tokens = 4 * LANES, 6
    x = rng.integers(-128, 128, (tokens, channels))
    y = np.ones_like(x) if beta == BETA_GELU else rng.integers(-128, 128, (tokens, channels))
    s_x = rng.uniform(0.002, 0.3, channels)
    a, c = act_constants(s_x, None if beta == BETA_GELU else rng.uniform(0.002, 0.3, channels),
                         beta)
    k = _second_pass_k(x, y, a, c)
    # The first pass's k is anything: a random factor, +inf (NaN and infinite w) and +0.
    k_first = np.array([from_float(3.0, FP32), FP32.infinity(0), 0, *k[3:]], np.uint32)
    _run(x, y, a, c, k_first, seed=1)
    _run(x, y, a, c, k, seed=2)


def test_every_corner_pair():
    """Every pair of CORNERS codes, with a gate scale whose exp2 argument reaches 126 (sigmoid 0
    and 1 at the ends), and an all-zero token (M = 0, k = +inf: codes 0)."""
    pairs = np.array(list(itertools.product(CORNERS, CORNERS)))
    x, y = pairs[:, 0].reshape(4, -1), pairs[:, 1].reshape(4, -1)
    x, y = np.vstack([x, np.zeros_like(x[:1])]), np.vstack([y, y[:1]])
    channels = x.shape[1]
    a, c = act_constants(np.full(channels, 0.68), np.full(channels, 0.05))
    _run(x, y, a, c, _second_pass_k(x, y, a, c), seed=3)


def test_full_rate_latency():
    """Without idle beats or back-pressure: one beat a cycle, the last result ``latency`` plus
    the queue's two cycles after the last beat; more beats than the queue has places, so a
    credit that came back a cycle late would show."""
    rng = np.random.default_rng(5)
    tokens = (GatedActivation.latency_of(LANES) + 8) // 2          # 2 beats a token
    x = rng.integers(-128, 128, (tokens, 2 * LANES))
    y = rng.integers(-128, 128, (tokens, 2 * LANES))
    a, c = act_constants(np.full(2 * LANES, 0.05), np.full(2 * LANES, 0.02))
    cycles = _run(x, y, a, c, _second_pass_k(x, y, a, c), seed=4, idle=0.0, stall=0.0)
    beats = x.size // LANES
    assert cycles == beats + GatedActivation.latency_of(LANES) + 2, cycles
    # 53 before session 25's cuts, 58 before 26's, 59 before 31's landed reciprocal, 67 before
    # session 36's landed fp32 pieces (three multipliers in the chain, a cycle each).
    assert GatedActivation.latency_of(LANES) == 70


@pytest.mark.parametrize("first", ["i", "q"])
def test_shared_quantizer_takes_turns(first):
    """With ``quantizer``: activation tokens on ``i`` and quantizer tokens on ``q``, one input
    held back until the other's last beat is taken; every result bit-exact in that order. A
    ``q`` beat waits until the activation beats before it have reached the core, and not a
    cycle longer (no idle input, no back-pressure)."""
    rng = np.random.default_rng(12)
    x, y = rng.integers(-128, 128, (2, 3, 2 * LANES))
    a, c = act_constants(rng.uniform(0.002, 0.3, 2 * LANES), rng.uniform(0.002, 0.3, 2 * LANES))
    k = _second_pass_k(x, y, a, c)
    values = rng.standard_normal((3, 2 * LANES)).astype(np.float32).view(np.uint32)
    factors = np.broadcast_to(rng.uniform(0.1, 2, (3, 1)).astype(np.float32).view(np.uint32),
                              values.shape)
    inputs = {"i": _beats(x, y, a, c, k), "q": _quant_beats(values, factors, LANES)}
    want = {"i": _expected(x, y, a, c, k), "q": _quant_expected(values, factors, LANES)}
    later = "q" if first == "i" else "i"
    unit = shared(GatedActivation, LANES, quantizer=True)
    taken = {"n": 0}

    def turns(ctx, cycle):
        if taken["n"] < len(inputs[first]):
            ctx.set(getattr(unit, later).valid, 0)
        port = getattr(unit, first)                    # its ready once the other is held
        taken["n"] += ctx.get(port.valid) and ctx.get(port.ready)

    at = {}
    got, _ = run_streams(unit, inputs, {"o": ["codes", "max"]}, watch=turns, accepted_at=at,
                         done=lambda r: len(r["o"]) == len(inputs["i"]) + len(inputs["q"]),
                         idle=0.0, stall=0.0, seed=6)
    for result in got["o"]:
        result["codes"] = [v & 0xFF for v in result["codes"]]
    expected = want[first] + want[later]
    for n, (g, w) in enumerate(zip(got["o"], expected)):
        assert g == w, f"result {n}: expected {w}, got {g}"
    to_core = GatedActivation.latency_of(LANES) - QuantCore.latency_of(LANES)
    wait = to_core + 1 if first == "i" else 1
    assert at[later][0] == at[first][-1] + wait, (at[first][-1], at[later][0])


def test_result_queue_in_lut_ram():
    """The unit's result queue (70 places at the landed reciprocal's latency) asks for LUT RAM:
    a block RAM's unregistered output failed the engine's placements (docs/rdxe.md 14.4)."""
    unit = GatedActivation(LANES)
    queue = unit.elaborate(None).submodules.queue
    assert queue.lut_ram and queue.depth == GatedActivation.latency_of(LANES) + 3


def test_lane_count_message():
    with pytest.raises(ValueError, match="Activation lane count must be a power of two between "
                                         "1 and 64, not 12"):
        GatedActivation(12)
    with pytest.raises(TypeError, match="Activation lane count must be an integer power of two"):
        GatedActivation.latency_of(4.0)
    with pytest.raises(TypeError, match="Activation quantizer must be True or False, not 1"):
        GatedActivation(4, quantizer=1)
