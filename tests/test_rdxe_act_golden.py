"""The VE activations' golden model (golden/rdxe/act.py): hand-computed answers, the stated
error bounds against the float64 reference on every INT8 gate/up pair, the quantizer's special
values and the argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from golden.arith.float import from_float, to_float
from golden.rdxe.act import (ACT_CODE_ERROR, BETA_GELU, BETA_SILU, GELU_FORM_GAP, act,
                             act_codes, act_constants, act_scale, act_worst, gelu,
                             gelu_form_gap, silu_glu)
from hdl.arith.format import FP32

LOG2E = math.log2(math.e)


def test_hand_computed_answers():
    # silu(1) = 1 / (1 + e^-1) = 0.7311; silu(127) = 127 (exp2(-183) flushes: sigmoid is 1).
    tr = silu_glu([1, 127], [1, 1], [1.0, 1.0], [1.0, 1.0])
    assert to_float(tr.values, FP32)[1] == 127.0
    assert abs(to_float(tr.values, FP32)[0] - 0.7310585786) < 1e-6
    assert tr.codes.tolist() == [1, 127] and tr.scale == 1.0
    # silu(-2) * -127 = 2 * 127 / (1 + e^2) = 30.2775; beside 127 it is code 30.
    tr = silu_glu([-2, 127], [-127, 1], [1.0, 1.0], [1.0, 1.0])
    assert abs(to_float(tr.values, FP32)[0] - 30.27754) < 1e-4
    assert tr.codes.tolist() == [30, 127]
    # A zero gate gives 0 whatever the up code; a token of zeros gives codes 0, scale 1.
    tr = silu_glu([[0, 0], [0, 5]], [[9, -9], [3, 7]], [0.5, 0.5], [0.25, 0.25])
    assert tr.codes.tolist() == [[0, 0], [0, 127]] and tr.scale[0] == 1.0
    # GELU: 1.5 sigmoid(1.702 * 1.5) = 1.4144 against Phi's 1.3998.
    tr = gelu([3, -4], [0.5, 0.5])
    assert abs(to_float(tr.values, FP32)[0] - 1.5 / (1 + math.exp(-BETA_GELU * 1.5))) < 1e-6


def test_constants_are_rounded_once():
    a, c = act_constants([0.1, 2.0], [3.0, 0.5])
    assert a.tolist() == from_float(-LOG2E * np.array([0.1, 2.0]), FP32).tolist()
    assert c.tolist() == from_float(np.array([0.3, 1.0]), FP32).tolist()
    a_gelu, c_gelu = act_constants([0.1], None, BETA_GELU)
    assert to_float(a_gelu, FP32)[0] == pytest.approx(-BETA_GELU * LOG2E * 0.1, rel=2 ** -24)
    assert to_float(c_gelu, FP32)[0] == pytest.approx(0.1, rel=2 ** -24)


# Scales of gate and up: SmolLM2-like (0.05, 0.03), a wide gate, a narrow one, and the widest
# gate whose exp2 argument stays below 126 for every code; GELU (no up input).
SCALES = [(BETA_SILU, 0.05, 0.03), (BETA_SILU, 0.3, 0.01), (BETA_SILU, 0.005, 1.0),
          (BETA_SILU, 125.9 / 128 / LOG2E, 0.1), (BETA_GELU, 0.04, None)]


@pytest.mark.parametrize("beta, s_g, s_u", SCALES)
def test_every_int8_pair_within_the_bounds(beta, s_g, s_u):
    """Every (gate, up) code pair as one vector: the values within act_value_bound of the
    float64 reference, the codes within half a code plus ACT_CODE_ERROR of ``127 h / max|h|``."""
    worst = act_worst(beta, s_g, s_u)
    assert worst["value_margin"] <= 1.0, worst
    assert worst["code_excess"] <= ACT_CODE_ERROR, worst
    assert worst["value_error"] > 2 ** -20, worst         # the exp2 error shows: not vacuous


def test_every_token_uses_the_full_range():
    rng = np.random.default_rng(7)
    g = rng.integers(-127, 128, (16, 64))
    u = rng.integers(-127, 128, (16, 64))
    s_g, s_u = rng.uniform(0.001, 0.2, 64), rng.uniform(0.001, 0.2, 64)
    tr = silu_glu(g, u, s_g, s_u)
    assert np.all(np.abs(tr.codes).max(axis=1) == 127)
    top, _ = act_scale(tr.values)
    assert np.array_equal(tr.scale, to_float(top, FP32) / 127)
    # One token alone gets the codes and scale it gets in the batch.
    one = silu_glu(g[3], u[3], s_g, s_u)
    assert np.array_equal(one.codes, tr.codes[3]) and one.scale == tr.scale[3]


def test_codes_special_values():
    one = from_float(1.0, FP32)
    values = from_float(np.array([1.0, -1.0, 0.5, 1.0 + 2 ** -20, -3.0, 2.0 ** -45, 0.0]), FP32)
    # k = 1: 127 v rounded and saturated (-3 to -127), tiny values to 0.
    assert act_codes(values, one).tolist() == [127, -127, 64, 127, -127, 0, 0]
    # NaN (0 x inf) gives 0, +-inf saturates.
    inf = FP32.infinity(0)
    specials = np.array([0, 1 << 31, from_float(2.0, FP32)], np.uint32)
    assert act_codes(specials, inf).tolist() == [0, 0, 127]
    assert act_codes(np.array([from_float(-1.0, FP32)], np.uint32), inf).tolist() == [-127]


def test_gelu_sigmoid_form_gap():
    gap, x = gelu_form_gap()
    assert 0.02 < gap <= GELU_FORM_GAP and 2.2 < abs(x) < 2.35


def test_bad_arguments():
    with pytest.raises(ValueError, match="Gate scales must be a non-empty 1-D array of positive "
                                         "finite scales, not \\[ 1. -1.\\]"):
        act_constants([1.0, -1.0])
    with pytest.raises(ValueError, match="Up scales must have 2 entries \\(the gate's\\), not 1"):
        act_constants([1.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="Activation beta must be a positive finite number, "
                                         "not 0"):
        act_constants([1.0], None, 0)
    a, c = act_constants([1.0, 1.0])
    with pytest.raises(ValueError, match="Gate codes must be between -128 and 127, not 128"):
        act([128, 0], [0, 0], a, c)
    with pytest.raises(ValueError, match="Up codes must be \\(channels,\\) or \\(tokens, "
                                         "channels\\) with 2 channels, not shape \\(3,\\)"):
        act([1, 0], [0, 0, 0], a, c)
    with pytest.raises(TypeError, match="Gate codes must be an integer array, not float64"):
        act([1.0, 0.0], [0, 0], a, c)
