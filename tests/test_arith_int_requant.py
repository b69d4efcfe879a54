# amaranth: UnusedElaboratable=no
# (components built here only to check their parameter validation are never elaborated)
"""Requantizer: golden model against hand-computed answers and an exact rational reference, the
RTL against the golden model in Amaranth's simulator, and the pinned parameter messages."""

import random
import re

import numpy as np
import pytest
from amaranth import Module
from amaranth.lib import wiring

from golden.arith.requant import corner_cases, limits, reference, requantize
from hdl.arith.requant import Requantizer
from memwall import registry
from memwall.params import ParameterError
from .pipeline_sim import run_pipeline

SEED = 31337
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1

# (x, m, shift, symmetric result, full result), each worked out by hand.
HAND = [
    (0, 12345, 7, 0, 0),
    (5, 1, 0, 5, 5),                      # shift 0: the product itself
    (5, 1, 1, 2, 2),                      # 2.5 -> 2 (tie to even)
    (7, 1, 1, 4, 4),                      # 3.5 -> 4
    (-5, 1, 1, -2, -2),                   # -2.5 -> -2
    (-7, 1, 1, -4, -4),                   # -3.5 -> -4
    (1, 1, 1, 0, 0),                      # 0.5 -> 0
    (-1, 1, 1, 0, 0),                     # -0.5 -> 0
    (3, 1, 1, 2, 2),                      # 1.5 -> 2
    (-3, 1, 1, -2, -2),                   # -1.5 -> -2
    (9, 1, 2, 2, 2),                      # 2.25 -> 2
    (10, 1, 2, 2, 2),                     # 2.5 -> 2
    (11, 1, 2, 3, 3),                     # 2.75 -> 3
    (-11, 1, 2, -3, -3),                  # -2.75 -> -3
    (-9, 1, 2, -2, -2),                   # -2.25 -> -2
    (127, 1, 0, 127, 127),                # exactly the upper limit
    (128, 1, 0, 127, 127),                # one beyond
    (253, 1, 1, 126, 126),                # 126.5 -> 126
    (255, 1, 1, 127, 127),                # 127.5 -> 128 -> saturates
    (-127, 1, 0, -127, -127),
    (-128, 1, 0, -127, -128),             # the full range's least value
    (-129, 1, 0, -127, -128),
    (-255, 1, 1, -127, -128),             # -127.5 -> -128 (even)
    (-257, 1, 1, -127, -128),             # -128.5 -> -128 (even)
    (-259, 1, 1, -127, -128),             # -129.5 -> -130 -> saturates
    (100, 1 << 30, 31, 50, 50),           # TFLite multiplier 0.5
    (101, 1 << 30, 31, 50, 50),           # 50.5 -> 50
    (103, 1 << 30, 31, 52, 52),           # 51.5 -> 52
    (-103, 1 << 30, 31, -52, -52),
    (1000, 1 << 30, 31, 127, 127),        # 500 saturates
    (I32_MIN, I32_MAX, 31, -127, -128),   # -(2**31 - 1) saturates
    (I32_MIN, I32_MIN, 62, 1, 1),         # 2**62 / 2**62
    (I32_MIN, I32_MIN, 61, 2, 2),
    (I32_MIN, I32_MIN, 63, 0, 0),         # 0.5 -> 0
    (I32_MIN, I32_MIN, 0, 127, 127),      # 2**62 saturates, does not wrap
    (I32_MIN, I32_MAX, 0, -127, -128),
    (I32_MAX, I32_MAX, 62, 1, 1),         # (2**62 - 2**32 + 1) / 2**62, just under 1
    (I32_MAX, I32_MAX, 63, 0, 0),         # just under one half
    (I32_MIN, 1, 63, 0, 0),               # -2**-32 -> 0
    (-1, 1, 63, 0, 0),
    (3 << 24, 3, 24, 9, 9),
    (3 << 24, -3, 25, -4, -4),            # -4.5 -> -4
]


@pytest.mark.parametrize("x, m, shift, sym, full", HAND)
def test_golden_hand(x, m, shift, sym, full):
    assert int(requantize(x, m, shift)) == sym
    assert int(requantize(x, m, shift, clamp="full")) == full
    assert reference(x, m, shift) == sym
    assert reference(x, m, shift, clamp="full") == full


def test_limits():
    assert limits(8, "symmetric") == (-127, 127)
    assert limits(8, "full") == (-128, 127)
    assert limits(4, "full") == (-8, 7)
    assert limits(16, "symmetric") == (-32767, 32767)


@pytest.mark.parametrize("out_bits, clamp", [(8, "symmetric"), (8, "full"), (4, "full"),
                                             (16, "symmetric")])
def test_golden_vs_reference(out_bits, clamp):
    """Corner cases and 20 000 random operands (half of them with shifts that land in range)."""
    rng = random.Random(SEED + out_bits)
    cases = corner_cases(32, 32, True, out_bits) + corner_cases(32, 32, False, out_bits)
    for _ in range(20000):
        x = rng.randint(I32_MIN, I32_MAX)
        m = rng.randint(I32_MIN, (1 << 32) - 1)
        shift = rng.randint(0, 63) if rng.random() < 0.5 else \
            max(0, min(63, abs(x * m).bit_length() - out_bits + rng.randint(-2, 2)))
        cases.append((x, m, shift))
    x, m, s = map(list, zip(*cases))
    got = requantize(x, m, s, out_bits=out_bits, clamp=clamp)
    want = [reference(*c, out_bits=out_bits, clamp=clamp) for c in cases]
    bad = [(cases[i], int(got[i]), want[i]) for i in range(len(cases)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} mismatches, first {bad[:3]}"
    # Stimulus sanity: the random half reaches both saturation limits and the interior.
    lo, hi = limits(out_bits, clamp)
    assert (got == lo).any() and (got == hi).any() and ((got > lo) & (got < hi)).sum() > 5000




@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("in_bits, out_bits, mult_bits, mult_signed, clamp", [
    (32, 8, 32, True, "symmetric"), (32, 8, 32, False, "full"), (20, 6, 9, True, "full"),
])
def test_rtl_matches_golden(stages, in_bits, out_bits, mult_bits, mult_signed, clamp):
    dut = Requantizer(in_bits, out_bits, clamp=clamp, mult_bits=mult_bits,
                      mult_signed=mult_signed, stages=stages)
    _check_against_golden(dut, stages, in_bits, out_bits, mult_bits, mult_signed, clamp)


# narrow_in_logic: the partial products with a slice of at most narrow_bits (default 8) in
# logic: the VAC's RCU (INT32 x 19-bit unsigned, 2 of 4 pieces), INT8 x 19-bit unsigned (both
# pieces; at narrow_bits 4, the VE's normalizer, the x 2-bit one only), a signed 3-bit top slice
# of x beside a 9-bit multiplier in a block (at narrow_bits 2: none). The same bits and cycles.
@pytest.mark.parametrize(
    "in_bits, out_bits, mult_bits, mult_signed, clamp, stages, narrow_bits, products", [
        (32, 32, 19, False, "full", 6, 8, 2), (32, 32, 19, False, "full", 7, 8, 2), (8, 8, 19, False, "symmetric", 4, 8, 0),
        (8, 8, 19, False, "symmetric", 4, 4, 1), (20, 6, 9, True, "full", 3, 8, 1),
        (20, 6, 9, True, "full", 3, 2, 2)])
def test_narrow_in_logic_matches_golden(in_bits, out_bits, mult_bits, mult_signed, clamp,
                                        stages, narrow_bits, products):
    from amaranth.back import rtlil
    dut = Requantizer(in_bits, out_bits, clamp=clamp, mult_bits=mult_bits,
                      mult_signed=mult_signed, stages=stages, narrow_in_logic=True,
                      narrow_bits=narrow_bits)
    assert registry.rtlil_size(rtlil.convert(
        dut, ports=registry.port_values(dut))).multipliers == products
    _check_against_golden(dut, stages, in_bits, out_bits, mult_bits, mult_signed, clamp)


class _LogicFed(wiring.Component):
    """A requantizer with ``logic_operands`` whose logic pieces take ``i.payload``'s operands
    (as the VAC's RCU: equal values from another register), or ``x + 1`` when ``off``."""

    def __init__(self, off: bool = False, **kwargs):
        self.unit, self.off = Requantizer(logic_operands=True, **kwargs), off
        self.latency = self.unit.latency
        members = self.unit.signature.members
        super().__init__({"i": members["i"], "o": members["o"]})

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self.unit
        wiring.connect(m, wiring.flipped(self.i), unit.i)
        wiring.connect(m, unit.o, wiring.flipped(self.o))
        m.d.comb += [unit.logic.x.eq(self.i.payload.x + self.off),
                     unit.logic.m.eq(self.i.payload.m)]
        return m


@pytest.mark.parametrize("stages", [6, 7])
def test_logic_operands_feed_the_logic_pieces(stages):
    """With ``logic_operands`` the pieces in logic read the ``logic`` member (at 7 stages
    through their own operand register): fed the same operands, the VAC's RCU configuration
    matches the golden; fed ``x + 1``, it does not."""
    kwargs = dict(in_bits=32, out_bits=32, mult_bits=19, mult_signed=False, clamp="full",
                  stages=stages, narrow_in_logic=True)
    _check_against_golden(_LogicFed(**kwargs), stages, 32, 32, 19, False, "full")
    with pytest.raises(AssertionError, match="mismatches"):
        _check_against_golden(_LogicFed(off=True, **kwargs), stages, 32, 32, 19, False, "full")


def test_narrow_in_logic_must_be_a_bool():
    for check in (Requantizer, Requantizer.latency_of):
        with pytest.raises(TypeError, match=exact("Requantizer narrow_in_logic must be True or "
                                                  "False, not 1")):
            check(narrow_in_logic=1)
        with pytest.raises(ValueError, match=exact("Requantizer narrow_bits must be between 1 "
                                                   "and 8, not 9")):
            check(narrow_in_logic=True, narrow_bits=9)


def _check_against_golden(dut, stages, in_bits, out_bits, mult_bits, mult_signed, clamp):
    """Corner cases and 600 random items with bubbles, bit for bit and at ``stages`` cycles."""
    assert dut.latency == stages
    rng = random.Random(SEED + stages)
    m_lo, m_hi = ((-(1 << (mult_bits - 1)), (1 << (mult_bits - 1)) - 1) if mult_signed
                  else (0, (1 << mult_bits) - 1))
    items = corner_cases(in_bits, mult_bits, mult_signed, out_bits)
    for _ in range(600):
        x = rng.randint(-(1 << (in_bits - 1)), (1 << (in_bits - 1)) - 1)
        m = rng.randint(m_lo, m_hi)
        items.append((x, m, max(0, min(63, abs(x * m).bit_length() - out_bits
                                       + rng.randint(-2, 2)))))
    run = run_pipeline(dut, [{"x": x, "m": m, "shift": s} for x, m, s in items], idle=0.3,
                       seed=SEED)
    assert (run.delays == stages).all(), "output valid cycles"
    got = run.outputs
    x, m, s = map(list, zip(*items))
    want = requantize(x, m, s, out_bits=out_bits, clamp=clamp)
    bad = [(items[i], got[i], int(want[i])) for i in range(len(items)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} mismatches (x, m, shift), got, expected: {bad[:3]}"


def exact(message):
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize("kwargs, kind, message", [
    ({"in_bits": 1}, ValueError, "Input width must be between 2 and 48, not 1"),
    ({"in_bits": 49}, ValueError, "Input width must be between 2 and 48, not 49"),
    ({"in_bits": 32.0}, TypeError, "Input width must be an integer between 2 and 48, not 32.0"),
    ({"out_bits": 33}, ValueError, "Output width must be between 2 and 32, not 33"),
    ({"in_bits": 16, "out_bits": 17}, ValueError, "Output width must be between 2 and 16, not 17"),
    ({"out_bits": 1}, ValueError, "Output width must be between 2 and 32, not 1"),
    ({"clamp": "saturate"}, ValueError,
     "Clamp must be 'symmetric' ([-(2**(b-1) - 1), 2**(b-1) - 1]) or 'full' "
     "([-2**(b-1), 2**(b-1) - 1]), not 'saturate'"),
    ({"mult_bits": 33}, ValueError, "Multiplier width must be between 2 and 32, not 33"),
    ({"mult_bits": 1}, ValueError, "Multiplier width must be between 2 and 32, not 1"),
    ({"mult_signed": 1}, TypeError, "Multiplier signedness must be True or False, not 1"),
    ({"stages": 0}, ValueError, "Pipeline stages must be between 1 and 7, not 0"),
    ({"stages": 8}, ValueError, "Pipeline stages must be between 1 and 7, not 8"),
    ({"narrow_in_logic": True, "logic_operands": 1}, TypeError,
     "Requantizer logic_operands must be True or False, not 1"),
    ({"logic_operands": True}, ValueError,
     "Requantizer logic_operands needs narrow_in_logic=True (without it no piece is in logic)"),
])
@pytest.mark.parametrize("check", [Requantizer, Requantizer.latency_of],
                         ids=["constructor", "latency_of"])
def test_errors(kwargs, kind, message, check):
    """The constructor and the latency function refuse a parameter with the same message."""
    with pytest.raises(kind, match=exact(message)):
        check(**kwargs)


@pytest.mark.parametrize("kwargs", [
    {"in_bits": 2, "out_bits": 2}, {"in_bits": 48}, {"out_bits": 32}, {"clamp": "full"},
    {"mult_bits": 2}, {"mult_bits": 32, "mult_signed": False}, {"stages": 1}, {"stages": 4},
    {"stages": 5}, {"stages": 6}, {"stages": 7},
])
def test_accepted(kwargs):
    """Each accepted set builds, and the latency function gives the built unit's latency."""
    assert Requantizer.latency_of(**kwargs) == Requantizer(**kwargs).latency


def test_registry():
    block = registry.get("arith-requant")
    assert block.family == "arith"
    for preset in ("small", "default", "paper"):
        block.validate(block.parameters(preset))
    assert block.parameters("default").clamp == "symmetric"
    assert block.parameters("paper").clamp == "full"
    with pytest.raises(ParameterError, match=exact("Pipeline stages must be between 1 and 7, "
                                                   "not 8")):
        block.parameters("default", {"stages": "8"})
    assert block.elaborate(block.parameters("default", {"stages": "2"})).latency == 2


def test_numpy_integer_scalars_are_exact():
    """NumPy integer scalars are widened like Python integers (no int64 overflow in x * m)."""
    assert int(requantize(2 ** 23, 127, np.int64(63))) == 0
    assert int(requantize(np.int64(2 ** 31 - 1), np.int64(2 ** 31 - 1), np.int64(40))) == 127
    assert int(requantize(np.int64(-(2 ** 31)), np.int64(2 ** 31 - 1), np.int64(62),
                          out_bits=32)) == reference(-(2 ** 31), 2 ** 31 - 1, 62, out_bits=32)


def test_int64_path_equals_python_integers():
    """Where products fit, requantize computes in int64: the same bits as Python integers on
    the corner cases and on random operands of every width the blocks use."""
    rng = np.random.default_rng(7)
    cases = [c for c in corner_cases(in_bits=32, mult_bits=28, shift_max=61)
             if abs(c[0] * c[1]) < 2 ** 62]
    x, m, s = (np.array(v, np.int64) for v in zip(*cases))
    for clamp in ("symmetric", "full"):
        np.testing.assert_array_equal(requantize(x, m, s, clamp=clamp),
                                      requantize(x, m, s, clamp=clamp, exact=True))
    x = rng.integers(-2 ** 31, 2 ** 31, 20000)
    m = rng.integers(-2 ** 29, 2 ** 29, 20000)
    s = rng.integers(0, 62, 20000)
    np.testing.assert_array_equal(requantize(x, m, s), requantize(x, m, s, exact=True))
    np.testing.assert_array_equal(requantize(x, m, s, out_bits=16),
                                  requantize(x, m, s, out_bits=16, exact=True))
