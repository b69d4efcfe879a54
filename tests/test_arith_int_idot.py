# amaranth: UnusedElaboratable=no
# (components built here only to check their parameter validation are never elaborated)
"""Integer dot product: golden model against hand-computed answers and a naive Python reference,
the accumulator-width bound, the RTL against the golden model in Amaranth's simulator (extremes in
every lane, tight accumulators, random bubbles), and the pinned parameter messages."""

import random
import re

import numpy as np
import pytest

from golden.arith.idot import dot, dot_reference, signed_width, sum_bounds
from hdl.arith.idot import IntDot, accumulator_bits
from memwall import registry
from memwall.params import ParameterError
from .pipeline_sim import run_pipeline

SEED = 4242


def test_golden_hand():
    assert int(dot([-128] * 64, [-128] * 64)) == 64 * 16384 == 1048576
    assert int(dot([-128] * 64, [127] * 64)) == -64 * 16256 == -1040384
    assert int(dot([1, 2, 3], [4, 5, 6])) == 32
    assert int(dot([-1, 2, -3, 4], [5, -6, 7, -8])) == -5 - 12 - 21 - 32
    assert int(dot([127, -128], [-8, 7])) == -1016 - 896               # int4 weight extremes
    assert list(dot([[1, 1], [2, -2]], [[3, 4], [5, 5]])) == [7, 0]   # vectorized over rows


def test_golden_vs_reference():
    rng = np.random.default_rng(SEED)
    for lanes, bits in ((1, 8), (7, 8), (64, 8), (64, 16)):
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1))
        a = rng.integers(lo, hi, size=(300, lanes))
        b = rng.integers(lo, hi, size=(300, lanes))
        assert dot(a, b).tolist() == dot_reference(a, b)


@pytest.mark.parametrize("lanes, a_bits, b_bits, need", [
    (64, 8, 8, 22),     # sums up to 64 * 2**14 = 2**20: 22 signed bits
    (16, 8, 8, 20),     # 2**18
    (1, 8, 8, 16),      # 2**14 needs 16 bits (15 hold only up to 2**14 - 1)
    (64, 8, 4, 18),     # 64 * 128 * 8 = 2**16
    (2, 2, 2, 5),       # products in [-2, 4], sums in [-4, 8]: 8 needs 5 bits
])
def test_accumulator_bound(lanes, a_bits, b_bits, need):
    assert accumulator_bits(lanes, a_bits, b_bits) == need
    assert signed_width(*sum_bounds(lanes, a_bits, b_bits)) == need




@pytest.mark.parametrize("lanes, a_bits, b_bits, register_every, latency", [
    (1, 8, 8, 1, 1), (2, 8, 4, 1, 2), (4, 8, 4, 1, 3), (16, 8, 8, 1, 5), (16, 8, 8, 3, 3),
    # --slow: 64 lanes run in make test with register_every 2, 8 x 8 with 16 lanes.
    pytest.param(64, 8, 8, 1, 7, marks=pytest.mark.slow), (64, 8, 4, 2, 4), (8, 16, 16, 6, 2),
])
def test_rtl_matches_golden(lanes, a_bits, b_bits, register_every, latency):
    need = accumulator_bits(lanes, a_bits, b_bits)
    dut = IntDot(lanes, a_bits=a_bits, b_bits=b_bits, acc_bits=need,
                 register_every=register_every)
    assert dut.latency == latency
    rng = random.Random(SEED + lanes)
    a_lo, a_hi = -(1 << (a_bits - 1)), (1 << (a_bits - 1)) - 1
    b_lo, b_hi = -(1 << (b_bits - 1)), (1 << (b_bits - 1)) - 1
    vectors = [([a_lo] * lanes, [b_lo] * lanes), ([a_lo] * lanes, [b_hi] * lanes),
               ([a_hi] * lanes, [b_lo] * lanes), ([a_hi] * lanes, [b_hi] * lanes),
               ([a_lo if k % 2 else a_hi for k in range(lanes)], [b_lo] * lanes)]
    for _ in range(150):
        vectors.append(([rng.randint(a_lo, a_hi) for _ in range(lanes)],
                        [rng.randint(b_lo, b_hi) for _ in range(lanes)]))
    run = run_pipeline(dut, [{"a": a, "b": b} for a, b in vectors], idle=0.3, seed=SEED)
    assert (run.delays == latency).all(), "output valid cycles"
    want = dot([a for a, _ in vectors], [b for _, b in vectors]).tolist()
    assert run.outputs == want
    # The tight accumulator is exercised at both ends.
    assert max(want) == lanes * a_lo * b_lo


def exact(message):
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize("lanes, kwargs, kind, message", [
    (12, {}, ValueError, "Lane count must be a power of two between 1 and 64, not 12"),
    (128, {}, ValueError, "Lane count must be a power of two between 1 and 64, not 128"),
    (0, {}, ValueError, "Lane count must be a power of two between 1 and 64, not 0"),
    (4.0, {}, TypeError, "Lane count must be an integer power of two between 1 and 64, not 4.0"),
    (4, {"a_bits": 1}, ValueError, "Operand a width must be between 2 and 16, not 1"),
    (4, {"b_bits": 17}, ValueError, "Operand b width must be between 2 and 16, not 17"),
    (64, {"acc_bits": 21}, ValueError,
     "Accumulator width must be between 22 and 64 for 64 lanes of 8 x 8-bit products, not 21"),
    (64, {"b_bits": 4, "acc_bits": 17}, ValueError,
     "Accumulator width must be between 18 and 64 for 64 lanes of 8 x 4-bit products, not 17"),
    (4, {"acc_bits": 65}, ValueError,
     "Accumulator width must be between 18 and 64 for 4 lanes of 8 x 8-bit products, not 65"),
    (4, {"acc_bits": "32"}, TypeError,
     "Accumulator width must be an integer between 18 and 64, not '32'"),
    (4, {"register_every": 0}, ValueError, "Tree register spacing must be between 1 and 6, not 0"),
])
@pytest.mark.parametrize("check", [IntDot, IntDot.latency_of], ids=["constructor", "latency_of"])
def test_errors(lanes, kwargs, kind, message, check):
    """The constructor and the latency function refuse a parameter with the same message."""
    with pytest.raises(kind, match=exact(message)):
        check(lanes, **kwargs)


@pytest.mark.parametrize("lanes, kwargs", [
    (1, {}), (64, {}), (64, {"acc_bits": 22}), (64, {"b_bits": 4, "acc_bits": 18}),
    (4, {"acc_bits": 64}), (4, {"a_bits": 2, "b_bits": 16}), (4, {"register_every": 6}),
    (16, {"register_every": 3}), (64, {"b_bits": 4, "register_every": 2}),
])
def test_accepted(lanes, kwargs):
    """Each accepted set builds, and the latency function gives the built unit's latency."""
    assert IntDot.latency_of(lanes, **kwargs) == IntDot(lanes, **kwargs).latency


def test_registry():
    block = registry.get("arith-idot")
    assert block.family == "arith"
    for preset in ("small", "default", "paper"):
        block.validate(block.parameters(preset))
    assert block.parameters("paper").b_bits == 4
    with pytest.raises(ParameterError, match=exact("Lane count must be a power of two between 1 "
                                                   "and 64, not 24")):
        block.parameters("default", {"lanes": "24"})
    assert block.elaborate(block.parameters("default", {"lanes": "64"})).latency == 7
