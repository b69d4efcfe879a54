"""The DXE's GPPU (hdl/rdxe/gppu.py) in Amaranth's simulator against golden.rdxe.dxe: each op on
random operands a quarter of them special fp32 values (zeros of both signs, subnormals that
flush, infinities, NaNs, values whose products overflow or flush), the residual add on every
pair of them, the dequantizations on every INT8 code, RoPE on directed corners; a random mix of
ops with idle inputs and back-pressure; one beat a cycle at full rate with the latency of
``latency_of``; the lane count's messages; the ops on layer 2's real residual, Q and K."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from golden.rdxe import dxe as D
from hdl.rdxe.gppu import Gppu, GppuOp
from tests.stream_sim import run_streams, shared

LANES = 4
#: fp32 codes of the corners: +-0, the smallest and largest subnormals (read as zero), the
#: smallest normal (products flush below it), +-1, 2**64 and the largest normal (products
#: overflow), +-inf, the canonical NaN, a signalling NaN and a negative NaN with a payload.
SPECIALS = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000,
                     0xBF800000, 0x5F800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
                     0x7FC00000, 0x7F800001, 0xFFC00123], np.uint32)


def _normals(rng, shape, spread: int = 40) -> np.ndarray:
    """Random fp32 codes of normal values of both signs over ``2**-spread`` to ``2**spread``."""
    return D.fp32(rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread, shape)))


def _mixed(rng, shape) -> np.ndarray:
    """Random fp32 codes, a quarter of them :data:`SPECIALS`."""
    special = rng.choice(SPECIALS, shape)
    return np.where(rng.random(shape) < 0.25, special, _normals(rng, shape)).astype(np.uint32)


def _lanes_of(values) -> list[list[int]]:
    """Rows of ``LANES`` values (the beats' lanes) of an array, in order."""
    return np.asarray(values).reshape(-1, LANES).tolist()


# --- beats and their golden results, one pair of builders per op ----------------------------


def dequantize(codes, scale, top=None):
    """Beats and golden results of ``dequantize`` (``top`` None) or ``dequantize_token`` with
    one ``top`` per beat: ``codes``, ``scale`` of ``LANES`` values a beat."""
    codes, scale = np.asarray(codes).reshape(-1, LANES), np.asarray(scale).reshape(-1, LANES)
    if top is None:
        op, want, top = GppuOp.DEQUANTIZE, D.dequantize(codes, scale), np.zeros(len(codes))
    else:
        top = np.asarray(top, np.uint32).reshape(-1)
        op, want = GppuOp.DEQUANTIZE_TOKEN, D.dequantize_token(codes, scale, top)
    beats = [{"op": op.value, "args": {"dequantize": {"codes": c, "scale": s, "top": int(t)}}}
             for c, s, t in zip(codes.tolist(), scale.tolist(), top.tolist())]
    return beats, _lanes_of(want)


def residual_add(h, y):
    """Beats and golden results of ``residual_add`` on fp32 codes ``h``, ``y``."""
    beats = [{"op": GppuOp.RESIDUAL_ADD.value, "args": {"add": {"h": a, "y": b}}}
             for a, b in zip(_lanes_of(h), _lanes_of(y))]
    return beats, _lanes_of(D.residual_add(h, y))


def rope(x, cos, sin):
    """Beats and golden results of ``rope`` on ``x`` ``(T, heads, d)`` with tables ``(T, 1, d /
    2)``; every beat carries the cos and sin of its own pairs."""
    x = np.asarray(x, np.uint32)
    cos = np.broadcast_to(cos, (*x.shape[:-1], x.shape[-1] // 2))
    sin = np.broadcast_to(sin, cos.shape)
    half = LANES // 2
    beats = [{"op": GppuOp.ROPE.value, "args": {"rope": {"x": a, "cos": c, "sin": s}}}
             for a, c, s in zip(_lanes_of(x), np.reshape(cos, (-1, half)).tolist(),
                                np.reshape(sin, (-1, half)).tolist())]
    return beats, _lanes_of(D.rope(x, cos, sin))


def _run(beats, want, *, seed: int, idle: float = 0.3, stall: float = 0.3, accepted=None):
    """Send ``beats`` through the unit and compare every result with ``want``; return the
    cycles taken (``accepted``, a dict, gets the cycles the beats were taken in)."""
    unit = shared(Gppu, LANES)
    got, cycles = run_streams(unit, {"i": beats}, {"o": ["y"]},
                              done=lambda r: len(r["o"]) == len(beats), idle=idle, stall=stall,
                              seed=seed, accepted_at=accepted)
    for n, (g, w) in enumerate(zip(got["o"], want)):
        op = GppuOp(beats[n]["op"]).name
        assert g["y"] == w, (f"beat {n} ({op}): expected {[hex(v) for v in w]}, "
                             f"got {[hex(v) for v in g['y']]}")
    return cycles


# --- each op on random and special operands ------------------------------------------------


def _dequantize_cases(rng, token: bool):
    """Every INT8 code against special and random scales (and special and random ``top``)."""
    codes = np.concatenate([np.arange(-128, 128), rng.integers(-128, 128, 4 * LANES)])
    scale = np.resize(np.concatenate([SPECIALS, _mixed(rng, 64)]), codes.shape)
    top = _mixed(rng, codes.size // LANES) if token else None
    if token:
        top[:SPECIALS.size] = SPECIALS
    return dequantize(codes, scale, top)


def _add_cases(rng):
    """Every pair of specials, then random codes with specials."""
    pairs = np.array(list(itertools.product(SPECIALS, SPECIALS)), np.uint32)
    h = np.concatenate([pairs[:, 0], _mixed(rng, 64)])
    y = np.concatenate([pairs[:, 1], _mixed(rng, 64)])
    # Cancellation to a subnormal (flushed) and sums that overflow.
    h[-4:] = [0x00C00000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000]
    y[-4:] = [0x80800000, 0x7F7FFFFF, 0xFF000000, 0xBF800000]
    cut = h.size - h.size % LANES
    return residual_add(h[:cut], y[:cut])


#: Pairs ``(x0, x1, cos, sin)`` of RoPE's corners: products that overflow, products that flush
#: (to zeros of both signs), a rotation to -0, ``inf - inf``, and a cancellation.
ROPE_CORNERS = [(2.0 ** 127, 2.0 ** 127, 2.0 ** 64, 1.0), (2.0 ** -126, -2.0 ** -126, 0.5, 0.5),
                (-0.0, 0.0, 1.0, 1.0), (np.inf, np.inf, 1.0, 1.0),
                (1.5 * 2.0 ** -100, -2.0 ** -100, 2.0 ** -30, 2.0 ** -30),
                (1.0, 1.0 + 2.0 ** -23, 1.0, 1.0)]


def _rope_cases(rng):
    """The corner pairs, every special x0 against the others, then random pairs and tables a
    quarter of them special."""
    beats, pairs = 48, LANES // 2
    x = _mixed(rng, (beats, 1, LANES))
    x[:SPECIALS.size, 0, 0] = SPECIALS
    x[:SPECIALS.size, 0, 1] = SPECIALS[::-1]
    cos, sin = _mixed(rng, (beats, 1, pairs)), _mixed(rng, (beats, 1, pairs))
    corners = D.fp32(ROPE_CORNERS)                      # (x0, x1, cos, sin) rows
    rows = slice(beats - len(corners) // pairs, beats)
    x[rows] = corners[:, :2].reshape(-1, 1, LANES)
    cos[rows], sin[rows] = corners[:, 2].reshape(-1, 1, pairs), corners[:, 3].reshape(-1, 1, pairs)
    return rope(x, cos, sin)


CASES = {"dequantize": lambda rng: _dequantize_cases(rng, False),
         "dequantize_token": lambda rng: _dequantize_cases(rng, True),
         "residual_add": _add_cases, "rope": _rope_cases}


@pytest.mark.parametrize("op", CASES)
def test_op_bit_exact(op):
    beats, want = CASES[op](np.random.default_rng(sorted(CASES).index(op)))
    _run(beats, want, seed=7)


def test_mixed_ops_with_idle_and_back_pressure():
    """The four ops' beats shuffled together, with 40 % idle inputs and 50 % back-pressure."""
    rng = np.random.default_rng(21)
    pool = [CASES[op](rng) for op in CASES]
    beats = [b for case in pool for b in case[0]]
    want = [w for case in pool for w in case[1]]
    order = rng.permutation(len(beats))[:160]
    _run([beats[k] for k in order], [want[k] for k in order], seed=8, idle=0.4, stall=0.5)


def test_full_rate_latency():
    """Without idle beats or back-pressure, more beats than the result queue has places: a beat
    taken every cycle, and the last result ``latency_of`` plus the queue's two cycles after the
    last beat."""
    rng = np.random.default_rng(5)
    pool = [CASES[op](rng) for op in CASES]
    beats = [b for case in pool for b in case[0][:24]]
    want = [w for case in pool for w in case[1][:24]]
    order = rng.permutation(len(beats))
    accepted: dict = {}
    cycles = _run([beats[k] for k in order], [want[k] for k in order], seed=9, idle=0.0,
                  stall=0.0, accepted=accepted)
    assert accepted["i"] == list(range(len(beats))), accepted["i"]
    assert cycles == len(beats) + Gppu.latency_of(LANES) + 2, cycles
    lat = Gppu.latencies()
    # The adder's operands are registered behind multiplier b (the 1); 24 before session 36's
    # landed fp32 pieces (a cycle each multiplier).
    assert Gppu.latency_of(LANES) == lat["to_fp32"] + 2 * lat["mul"] + 1 + lat["add"] == 26


def test_lane_count_messages():
    for bad in (1, 12, 128):
        with pytest.raises(ValueError, match=f"GPPU lane count must be a power of two between 2 "
                                             f"and 64, not {bad}$"):
            Gppu(bad)
    with pytest.raises(TypeError, match="GPPU lane count must be an integer power of two between "
                                        "2 and 64, not 4.0"):
        Gppu.latency_of(4.0)


# --- a real layer's tensors ------------------------------------------------------------------


@pytest.fixture(scope="module")
def layer_tensors(smol, layer_inputs):
    """One token's residual entering layer 2 (the shared ``layer_inputs``, the token at position
    1), that layer's float contribution to it, and its float Q and K before RoPE."""
    from sim.llm.model import Llama
    h, q, k, c = layer_inputs
    model = Llama(smol)
    out = model.layer(2, h, model.new_cache(), np.arange(h.shape[0]))
    return h[1:2], (out - h)[1:2], q[1:2], k[1:2], c


def test_ops_on_real_layer(layer_tensors):
    """Layer 2's residual add; its residual's INT8 codes dequantized with a static per-channel
    scale and with the token's M; RoPE of Q (3 heads) and K (1 head) at position 500."""
    from sim.llm.model import rope_tables
    h, y, q, k, c = layer_tensors
    hc = D.codes_of(h)
    quant = D.quantize(hc)
    channels = slice(0, 128)
    codes = quant.codes[0, channels]
    scale = np.abs(h[0, channels]) / 127 + 1e-3
    cos, sin = D.rope_codes(*rope_tables(np.array([500]), c.rope_base, c.head_dim, np.float64))
    cases = [residual_add(hc[0, :256], D.codes_of(y)[0, :256]),
             dequantize(codes, D.fp32(scale)),
             dequantize(codes, D.fp32(scale[::-1] / 127),
                        np.repeat(quant.top, codes.size // LANES)),
             rope(D.codes_of(q[:, :3]), cos, sin), rope(D.codes_of(k[:, :1]), cos, sin)]
    beats = [b for case in cases for b in case[0]]
    want = [w for case in cases for w in case[1]]
    _run(beats, want, seed=10, idle=0.1, stall=0.1)
