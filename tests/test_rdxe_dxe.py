"""golden.rdxe.dxe: the DXE's steps between the GEMVs (quantize, dequantize, residual add, RoPE,
RMSNorm's epsilon, the score PPU), each first on hand-computed answers, then against its float64
reference within its stated bound on SmolLM2's real tensors (a residual, Q and K of one layer)."""

from __future__ import annotations

import numpy as np
import pytest

from golden.arith.float import from_float, to_float
from golden.rdxe import dxe as D
from golden.rdxe.params import DxtConfig
from hdl.arith.format import FP32
from sim.llm.backends.rdxe import PAPER
from sim.llm.model import rope_tables

U = 2.0 ** -24
PARAMS = DxtConfig(**PAPER)


def f32(x):
    return np.asarray(from_float(np.asarray(x, np.float64), FP32), np.uint32)


def val(codes):
    return to_float(np.asarray(codes, np.uint32), FP32)


# --- hand-computed answers -----------------------------------------------------------------


def test_quantize_by_hand():
    q = D.quantize(f32([[1.0, -0.5, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    # -63.5 and 31.75: the tie goes to the even code, 31.75 up.
    assert q.codes.tolist() == [[127, -64, 32, 0], [0, 0, 0, 0]]
    assert val(q.top).tolist() == [1.0, 0.0] and val(q.k)[0] == 1.0
    assert q.scale.tolist() == [1 / 127, 1.0]


def test_quantize_static_by_hand():
    k = D.static_inverse(np.array([1 / 127, 2 / 127]))
    assert val(k).tolist() == [1.0, 0.5]
    assert D.quantize_static(f32([[1.0, 0.5], [0.5, 300.0]]), k).tolist() == [[127, 32], [64, 127]]
    with pytest.raises(ValueError, match="Static scales must be positive and finite, not"):
        D.static_inverse(np.array([0.5, 0.0]))


def test_dequantize_by_hand():
    assert val(D.dequantize([3, -127], f32([0.5, 2.0]))).tolist() == [1.5, -254.0]
    assert val(D.dequantize_token([[2, -3]], f32([0.25, 0.5]), f32([4.0]))).tolist() == \
        [[2.0, -6.0]]


def test_residual_add_by_hand():
    got = D.residual_add(f32([1.0, 1.0, 1.5 * 2.0 ** -126]),
                         f32([2.0 ** -24, 3 * 2.0 ** -24, -(2.0 ** -126)]))
    # A tie to even, a round up, and a subnormal sum flushed to +0.
    assert val(got).tolist() == [1.0, 1.0 + 2.0 ** -22, 0.0]


def test_rope_by_hand():
    x = f32([[[1.0, 0.0, 1.0, 2.0]]])
    got = D.rope(x, f32([[[0.0, 0.5]]]), f32([[[1.0, 0.5]]]))
    assert val(got).tolist() == [[[0.0, 1.0, -0.5, 1.5]]]


def test_rms_eps_by_hand():
    # 127**2 / 16129 rounds to 1; k = 1/2 twice: 1/4. k = +inf (a zero token): +0.
    got = D.rms_eps(f32([0.5, np.inf, 2.0 ** 100]), 1 / 16129)
    assert val(got[:2]).tolist() == [0.25, 0.0]
    assert got[2] == FP32.max_normal                       # the product overflows: saturated


def test_score_factor_by_hand():
    rc = D.score_factor(f32([2.0]), f32([0.375]), PARAMS)
    assert rc.value.tolist() == [0.75]


def test_codes_of_round_trip_and_flush():
    x = np.array([1.5, -2.0, 1e-40], np.float32)
    assert val(D.codes_of(x)).tolist() == [1.5, -2.0, 0.0]
    assert np.array_equal(D.values_of(D.codes_of(x[:2])), x[:2])


# --- float64 references and bounds on real tensors -----------------------------------------


def test_quantize_bound_on_real_residual(layer_inputs):
    h = layer_inputs[0]
    rng = np.random.default_rng(3)
    wide = rng.standard_normal((64, 576)) * np.exp2(rng.integers(-60, 60, (64, 1)))
    for x in (D.codes_of(h), D.codes_of(h[:, :576] * 1e-3), f32(wide)):
        q = D.quantize(x)
        err = np.abs(q.codes - D.quantize_reference(val(x))).max()
        assert err <= 0.5 + D.QUANT_CODE_ERROR, err
        assert np.abs(q.codes).max() == 127


def test_dequantize_bounds_on_real_codes(layer_inputs):
    h = layer_inputs[0]
    q = D.quantize(D.codes_of(h))
    s = np.abs(h).max(axis=0) / 127 + 1e-3                  # a static scale per channel
    ref = q.codes * s
    got = val(D.dequantize(q.codes, D.fp32(s)))
    assert np.all(np.abs(got - ref) <= D.DEQUANT_ERROR * np.abs(ref))
    k = s[::-1].copy()
    ref = q.codes * k * val(q.top)[:, None] / 127
    got = val(D.dequantize_token(q.codes, D.fp32(k / 127), q.top))
    assert np.all(np.abs(got - ref) <= D.DEQUANT_TOKEN_ERROR * np.abs(ref))


def test_residual_add_bound_on_real_residual(layer_inputs):
    h = layer_inputs[0]
    y = np.roll(h, 1, axis=0) * np.float32(0.37)
    exact = val(D.codes_of(h)) + val(D.codes_of(y))         # exact in float64 for fp32 inputs
    got = val(D.residual_add(D.codes_of(h), D.codes_of(y)))
    assert np.all(np.abs(got - exact) <= D.ADD_ERROR * np.abs(exact))


def test_rope_bound_on_real_q_and_k(layer_inputs):
    _, q, k, c = layer_inputs
    positions = np.arange(500, 508)                         # large angles: every table value
    cos, sin = rope_tables(positions, c.rope_base, c.head_dim, np.float64)
    for x in (q, k):
        xc = D.codes_of(x)
        got = val(D.rope(xc, *D.rope_codes(cos, sin)))
        ref = D.rope_reference(val(xc), cos, sin)
        pair = np.repeat(np.abs(val(xc))[..., 0::2] + np.abs(val(xc))[..., 1::2], 2, axis=-1)
        assert np.all(np.abs(got - ref) <= D.ROPE_ERROR * U * pair)


def test_rms_eps_and_score_factor_bounds(layer_inputs):
    h, q = layer_inputs[0], layer_inputs[1]
    xq = D.quantize(D.codes_of(h))
    eps = 1e-5
    ref = 127.0 ** 2 * eps / val(xq.top) ** 2
    got = val(D.rms_eps(xq.k, eps))
    assert np.all(np.abs(got - ref) <= D.rms_eps_bound() * ref)
    qq = D.quantize(D.codes_of(q.reshape(8, -1)))
    const = 0.043 / (127 * 8.0 * 0.09)
    rc = D.score_factor(qq.top, D.fp32(const), PARAMS)
    ref = val(qq.top) * const
    assert np.all(np.abs(rc.value - ref) <= D.score_factor_bound(PARAMS) * ref)


def test_program_operation_messages():
    """A quantization names exactly one factor; a region read before it is written is named."""
    from golden.rdxe import program as P
    with pytest.raises(ValueError, match="Quant needs one factor, a register k or a table, not "
                                         "k=None and table=None"):
        P.Quant("h", "x")
    with pytest.raises(ValueError, match="not k='k' and table='t'"):
        P.Quant("h", "x", k="k", table="t")
    with pytest.raises(KeyError, match="region 'h' is not written yet; regions are"):
        P.Max("h", "M").run(P.DxeState(), None)
