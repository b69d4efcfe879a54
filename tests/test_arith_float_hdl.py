# amaranth: UnusedElaboratable=no
# (components built here only to check their parameter validation are never elaborated)
"""Floating-point units in Amaranth's simulator against the golden models, at every stage count
and several format pairs, with bubbles in the valid stream; latency formulas; pinned parameter
messages."""

import itertools

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.sim import Simulator

from golden.arith.float import (fadd, fconvert, fdot, fmac, fmul, int_to_float, operand_pairs,
                                random_codes)
from hdl.arith.convert import FloatConvert, IntToFloat
from hdl.arith.fdot import FloatDot
from hdl.arith.float import at_least
from hdl.arith.format import BF16, FP16, FP32, float_format
from hdl.arith.fpadd import FloatAdder
from hdl.arith.fpmac import FloatMAC
from hdl.arith.fpmul import FloatMultiplier, exact_product
from hdl.pipeline import delay
from memwall import registry
from memwall.params import ParameterError
from .pipeline_sim import run_pipeline

SEED = 4242


def _randoms(full: int, stages: int, default: int) -> int:
    """Random operand pairs beside the corner pairs (``operand_pairs`` gives every pair of corner
    codes first): ``full`` at the unit's default stage count, a quarter at the others. The
    results do not depend on the stage count; where the registers cut does, and every corner pair
    with a few hundred random ones and the bubbles between them reaches it."""
    return full if stages == default else full // 4


def check(component, items, want):
    run = run_pipeline(component, items, seed=SEED)
    got, delay = np.array(run.outputs, dtype=np.uint64), run.delays
    want = np.asarray(want).astype(np.uint64)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), (f"{len(bad)} mismatches; first item {items[bad[0]]}: expected "
                          f"{int(want[bad[0]]):#x} got {int(got[bad[0]]):#x}")
    assert (delay == component.latency).all(), f"latency {set(delay)} != {component.latency}"


def covering(axes, keep):
    """pytest parameters of every combination of ``axes``, those outside make test's covering
    subset marked slow (make test-all: conftest.py).

    ``axes``: one list per axis of ``(id, args)``, ``args`` the tuple of that axis's argument
    values; a combination's test id is its ids joined by ``-``, as the stacked ``parametrize``
    decorators these replace wrote them (ids stay stable). ``keep(*indices)`` says whether the
    combination of those value indices runs in make test. Raises ``ValueError`` when the kept
    combinations leave out a value of an axis (every value must run in make test).
    """
    params, kept = [], []
    for combo in itertools.product(*(list(enumerate(axis)) for axis in axes)):
        index = [i for i, _ in combo]
        runs = bool(keep(*index))
        kept += [index] if runs else []
        params.append(pytest.param(*(v for _, (_, args) in combo for v in args),
                                   id="-".join(str(name) for _, (name, _) in combo),
                                   marks=[] if runs else [pytest.mark.slow]))
    for n, axis in enumerate(axes):
        missing = [name for i, (name, _) in enumerate(axis) if all(k[n] != i for k in kept)]
        if missing:
            raise ValueError(f"make test's subset must run every value of axis {n}; it leaves "
                             f"out {missing}")
    return params


def axis(values, ids=str):
    """One axis of :func:`covering`: each value as a one-argument ``(id, (value,))``."""
    return [(ids(v), (v,)) for v in values]


MUL_FORMATS = [(FP32, FP32, FP32), (BF16, BF16, FP32), (FP16, FP16, FP32), (BF16, BF16, BF16),
               (FP16, FP16, FP16), (FP32, FP32, BF16), (FP16, BF16, FP16)]


def _fmts_id(fmts):
    return "x".join(map(str, fmts))


# --slow: each format pair at one stage count and each stage count once in make test (fp32 x
# fp32 at the default 5); the cuts place the same registers whatever the widths.
@pytest.mark.parametrize("fmts, stages", covering(
    [axis(MUL_FORMATS, _fmts_id), axis(range(1, 7))], lambda f, s: s == (f + 4) % 6))
def test_multiplier(fmts, stages):
    a, b = operand_pairs(np.random.default_rng(SEED + stages), fmts[0], fmts[1],
                         _randoms(800, stages, FloatMultiplier().stages))
    check(FloatMultiplier(*fmts, stages=stages), [{"a": x, "b": y} for x, y in zip(a, b)],
          fmul(a, b, *fmts))


# The DSP-placement options (pieces of at most 18 bits, a private operand copy per piece) change
# no result bit; stages 4 and up register the copies (the second operand copy inverts their
# power-on values). --slow: every stage count with each copy in make test, the format pairs
# taking turns (each runs twice).
@pytest.mark.parametrize("fmts, stages, copy", covering(
    [axis([(FP32, FP32, FP32), (FP32, BF16, FP32), (BF16, BF16, FP32)], _fmts_id),
     axis([3, 4, 6]), axis([0, 1])], lambda f, s, c: f == (s + c) % 3))
def test_multiplier_split_private(fmts, stages, copy):
    a, b = operand_pairs(np.random.default_rng(SEED + 10 + stages), fmts[0], fmts[1], 800)
    check(FloatMultiplier(*fmts, stages=stages, split="wide", private_operands=True,
                          operand_copy=copy),
          [{"a": x, "b": y} for x, y in zip(a, b)], fmul(a, b, *fmts))


# narrow_in_logic: every piece with a side of at most 8 bits in logic (the DXE controller's
# fp32 x fp32 multipliers under "dsp18": one block; a bf16 operand's pieces all in logic, and
# under "both" the 12 x 4 pieces of fp32 x bf16). The same bits and latency.
# With land_pieces the pieces in logic are summed across the pieces' register and the landing
# one (the DXE controller's FP32_ONE_BLOCK): one cycle more, the same bits.
@pytest.mark.parametrize("fmts, split, land", [((FP32, FP32, FP32), "dsp18", False),
                                               ((BF16, FP32, FP32), "dsp18", False),
                                               ((FP32, BF16, FP32), "both", False),
                                               ((FP32, FP32, FP32), "dsp18", True),
                                               ((BF16, FP32, FP32), "dsp18", True)])
def test_multiplier_narrow_in_logic(fmts, split, land):
    a, b = operand_pairs(np.random.default_rng(SEED + 20), fmts[0], fmts[1], 800)
    unit = FloatMultiplier(*fmts, split=split, narrow_in_logic=True, land_pieces=land)
    assert unit.latency == FloatMultiplier.latency_of(
        *fmts, split=split, narrow_in_logic=True, land_pieces=land) == 5 + land
    check(unit, [{"a": x, "b": y} for x, y in zip(a, b)], fmul(a, b, *fmts))


@pytest.mark.parametrize("fmts, split, products", [
    ((FP32, FP32, FP32), "dsp18", 1), ((FP32, FP32, FP32), "both", 4),
    ((BF16, FP32, FP32), "dsp18", 0), ((FP32, BF16, FP32), "both", 0)])
def test_multiplier_narrow_in_logic_products(fmts, split, products):
    """The products left to multiplier blocks (RTLIL ``$mul``; the pieces in logic have none)."""
    from amaranth.back import rtlil
    unit = FloatMultiplier(*fmts, split=split, narrow_in_logic=True)
    assert registry.rtlil_size(rtlil.convert(
        unit, ports=registry.port_values(unit))).multipliers == products


def test_multiplier_narrow_in_logic_must_be_a_bool():
    for check_ in (FloatMultiplier, FloatMultiplier.latency_of):
        with pytest.raises(TypeError, match=r"^Multiplier narrow_in_logic must be True or "
                                            r"False, not 1$"):
            check_(FP32, FP32, FP32, narrow_in_logic=1)


# --slow: each stage count once in make test, the formats taking turns (fp32 at the default 6);
# the cuts fall in the same logic whatever the width.
@pytest.mark.parametrize("fmt, stages", covering(
    [axis([FP32, BF16, FP16]), axis(range(1, 10))], lambda f, s: f == (s + 1) % 3))
def test_adder(fmt, stages):
    a, b = operand_pairs(np.random.default_rng(SEED + stages), fmt, fmt,
                         _randoms(1200, stages, FloatAdder().stages), add=True)
    check(FloatAdder(fmt, stages=stages), [{"a": x, "b": y} for x, y in zip(a, b)],
          fadd(a, b, fmt))


# Shallower alignment and normalization logic, and cut points chosen explicitly: same results.
# --slow: each depth and cut list once in make test, the formats taking turns.
@pytest.mark.parametrize("fmt, stages, cuts", covering(
    [axis([FP32, BF16, FP16]),
     [("1-None", (1, None)), ("3-cuts1", (3, (2, 5))), ("8-cuts2", (8, (0, 1, 3, 4, 5, 6, 7))),
      ("9-None", (9, None))]], lambda f, s: f == s % 3))
def test_adder_balanced(fmt, stages, cuts):
    a, b = operand_pairs(np.random.default_rng(SEED + 20 + stages), fmt, fmt, 1200, add=True)
    check(FloatAdder(fmt, stages=stages, cuts=cuts, balanced=True),
          [{"a": x, "b": y} for x, y in zip(a, b)], fadd(a, b, fmt))


def test_multiplier_cuts():
    a, b = operand_pairs(np.random.default_rng(SEED + 30), FP32, FP32, 800)
    check(FloatMultiplier(FP32, FP32, FP32, stages=5, cuts=(0, 1, 3, 4)),
          [{"a": x, "b": y} for x, y in zip(a, b)], fmul(a, b, FP32, FP32, FP32))


@pytest.mark.parametrize("a_fmt, b_fmt, stages, cuts", [
    (BF16, FP32, 5, None), (FP32, FP32, 1, None), (FP32, FP32, 4, (0, 1, 4)),
    (BF16, BF16, 6, None)], ids=str)
def test_multiplier_landed_pieces(a_fmt, b_fmt, stages, cuts):
    """The pieces registered once more: one cycle more than ``stages``, the same results."""
    a, b = operand_pairs(np.random.default_rng(SEED + 31), a_fmt, b_fmt, 600)
    unit = FloatMultiplier(a_fmt, b_fmt, FP32, stages=stages, cuts=cuts, land_pieces=True)
    assert unit.latency == FloatMultiplier.latency_of(
        a_fmt, b_fmt, FP32, stages=stages, cuts=cuts, land_pieces=True) == stages + 1
    check(unit, [{"a": x, "b": y} for x, y in zip(a, b)], fmul(a, b, a_fmt, b_fmt, FP32))


def test_multiplier_land_pieces_must_be_a_bool():
    with pytest.raises(TypeError, match=r"^Multiplier land_pieces must be True or False, not 1$"):
        FloatMultiplier(land_pieces=1)


@pytest.mark.parametrize("in_fmt, acc_fmt, kwargs, latency", [
    (BF16, FP32, dict(mul_stages=2, add_stages=3), 5),
    (FP16, FP32, dict(mul_stages=2, add_stages=3), 5),
    (BF16, BF16, dict(mul_stages=2, add_stages=3), 5),
    (FP32, FP32, dict(add_stages=7, add_cuts=(3, 5, 1, 4, 6, 0), block_registers=True), 12),
    # The RC unit's (hdl.rdxe.ve): the adder's compare registered too, the blocks asked for,
    # the multiplier's pieces landed.
    (FP32, FP32, dict(add_stages=7, add_cuts=(3, 5, 1, 4, 6, 0), block_registers=True,
                      land_pieces=True), 13),
], ids=["bf16-fp32", "fp16-fp32", "bf16-bf16", "fp32-compare-cut", "fp32-landed"])
def test_mac(in_fmt, acc_fmt, kwargs, latency):
    rng = np.random.default_rng(SEED)
    a, b = operand_pairs(rng, in_fmt, in_fmt, 600)
    prod = fmul(a, b, in_fmt, in_fmt, acc_fmt).astype(np.uint64)
    c = np.where(rng.random(len(a)) < 0.5, prod ^ np.uint64(1 << (acc_fmt.width - 1)),
                 random_codes(rng, acc_fmt, len(a), exp_spread=10).astype(np.uint64))
    unit = FloatMAC(in_fmt, acc_fmt, **kwargs)
    assert unit.latency == FloatMAC.latency_of(in_fmt, acc_fmt, **kwargs) == latency
    check(unit, [{"a": x, "b": y, "c": z} for x, y, z in zip(a, b, c)],
          fmac(a, b, c, in_fmt, acc_fmt))


class _LateC(wiring.Component):
    """A :class:`FloatMAC` with ``late_c``, its ``c`` delayed outside it (as the FusedDQP's
    dequantizer does in per-lane copies): the same interface and results as the plain unit."""

    def __init__(self, **kwargs):
        self.mac = FloatMAC(BF16, FP32, late_c=True, **kwargs)
        self.latency = self.mac.latency
        super().__init__(dict(self.mac.signature.members))

    def elaborate(self, platform):
        m = Module()
        m.submodules.mac = mac = self.mac
        m.d.comb += [mac.i.valid.eq(self.i.valid), mac.i.payload.a.eq(self.i.payload.a),
                     mac.i.payload.b.eq(self.i.payload.b),
                     mac.i.payload.c.eq(delay(m, self.i.payload.c, mac.mul_latency)),
                     self.o.valid.eq(mac.o.valid), self.o.payload.eq(mac.o.payload)]
        return m


@pytest.mark.parametrize("kwargs", [dict(block_registers=True), dict(mul_stages=2)], ids=str)
def test_mac_takes_c_late(kwargs):
    """``late_c``: ``c`` taken ``mul_latency`` cycles after ``a`` and ``b``, the same sums."""
    rng = np.random.default_rng(SEED + 7)
    a, b = operand_pairs(rng, BF16, BF16, 300)
    c = random_codes(rng, FP32, len(a), exp_spread=10).astype(np.uint64)
    unit = _LateC(**kwargs)
    assert unit.mac.mul_latency == FloatMultiplier.latency_of(
        BF16, BF16, FP32, stages=kwargs.get("mul_stages", 5),
        block_registers=kwargs.get("block_registers", False))
    check(unit, [{"a": x, "b": y, "c": z} for x, y, z in zip(a, b, c)],
          fmac(a, b, c, BF16, FP32))


# --slow: each format pair at one stage count in make test, both counts run.
@pytest.mark.parametrize("in_fmt, out_fmt, stages", covering(
    [[(f"{i}-{o}", (i, o)) for i, o in [(FP32, BF16), (FP32, FP16), (BF16, FP32), (FP16, FP32),
                                        (FP16, BF16)]], axis([1, 2])], lambda f, s: s == f % 2))
def test_convert(in_fmt, out_fmt, stages):
    rng = np.random.default_rng(SEED)
    x = np.concatenate([random_codes(rng, in_fmt, 1000),
                        random_codes(rng, in_fmt, 1000, exp_spread=out_fmt.bias + 2)])
    check(FloatConvert(in_fmt, out_fmt, stages=stages), [{"x": v} for v in x],
          fconvert(x, in_fmt, out_fmt))


# --slow: each width and format at one stage count in make test, every count run (the shifter
# and the rounding are the same logic at each depth).
@pytest.mark.parametrize("bits, fmt, stages", covering(
    [[(f"{b}-{f}", (b, f)) for b, f in [(32, FP32), (16, BF16), (32, FP16), (8, FP32),
                                        (2, FP16)]], axis(range(1, 5))], lambda f, s: s == f % 4))
def test_int_to_float(bits, fmt, stages):
    rng = np.random.default_rng(SEED)
    mask = (1 << bits) - 1
    x = [0, 1, mask, 1 << (bits - 1), (1 << (bits - 1)) - 1]
    x += [int(v) for v in rng.integers(0, 1 << bits, 1000, dtype=np.uint64)]
    x += [int(rng.integers(0, 1 << int(k))) & mask for k in rng.integers(1, bits, 500)]
    x += [(-int(rng.integers(0, 1 << int(k)))) & mask for k in rng.integers(1, bits, 500)]
    check(IntToFloat(bits, fmt, stages=stages), [{"x": v} for v in x],
          int_to_float(x, bits, fmt))


# --slow: each lane count once in make test, the formats taking turns.
@pytest.mark.parametrize("in_fmt, lanes", covering(
    [axis([BF16, FP16]), axis([1, 2, 4, 16])], lambda f, n: f == n % 2))
def test_dot(in_fmt, lanes):
    rng = np.random.default_rng(SEED + lanes)
    rows = 150
    a = random_codes(rng, in_fmt, rows * lanes, exp_spread=6).reshape(rows, lanes)
    b = random_codes(rng, in_fmt, rows * lanes, exp_spread=6).reshape(rows, lanes)
    ca, cb = operand_pairs(rng, in_fmt, in_fmt, 0)
    order = rng.permutation(len(ca))[:30 * lanes]
    a[:30], b[:30] = ca[order].reshape(30, lanes), cb[order].reshape(30, lanes)
    unit = FloatDot(in_fmt, lanes, mul_stages=2, add_stages=2)
    assert unit.latency == 2 + 2 * (lanes.bit_length() - 1)
    items = [{**{f"a.{k}": r[k] for k in range(lanes)}, **{f"b.{k}": s[k] for k in range(lanes)}}
             for r, s in zip(a, b)]
    check(unit, items, fdot(a, b, in_fmt))


def test_covering_keeps_every_value():
    params = covering([axis([1, 2]), axis("abc")], lambda i, j: j % 2 == i)
    assert [p.id for p in params if not p.marks] == ["1-a", "1-c", "2-b"]
    assert {p.id: p.values for p in params}["2-c"] == (2, "c")
    assert [p.id for p in params if [m.name for m in p.marks] == ["slow"]] == ["1-b", "2-a", "2-c"]
    with pytest.raises(ValueError, match=r"^make test's subset must run every value of axis 1; "
                                         r"it leaves out \['c'\]$"):
        covering([axis([1, 2]), axis("abc")], lambda i, j: j == i)


def test_default_latencies():
    assert FloatMultiplier().latency == 5
    assert FloatAdder().latency == 6
    assert FloatMAC().latency == 11
    assert FloatConvert().latency == 2
    assert IntToFloat().latency == 3
    assert FloatDot(BF16, 16).latency == 5 + 4 * 6
    assert FloatDot(BF16, 1).latency == 5


@pytest.mark.parametrize("width", [1, 4, 9])
def test_at_least_is_the_comparison(width):
    """``at_least`` (gates, no carry chain) equals ``>=`` for every value and every bound,
    bounds beyond the value's range included."""
    value = Signal(width)
    bounds = range(-1, (1 << width) + 2)
    outputs = [Signal(name=f"ge{n}") for n in range(len(bounds))]
    m = Module()
    m.d.comb += [o.eq(at_least(value, k)) for o, k in zip(outputs, bounds)]
    sim = Simulator(m)
    wrong = []

    async def bench(ctx):
        for x in range(1 << width):
            ctx.set(value, x)
            wrong.extend((x, k) for o, k in zip(outputs, bounds) if ctx.get(o) != (x >= k))

    sim.add_testbench(bench)
    sim.run()
    assert not wrong, f"at_least differs from >= at (value, bound) {wrong[:5]}"


def test_exact_product_claims():
    assert exact_product(FP16, FP16, FP32) == "always"
    assert exact_product(BF16, BF16, FP32) == "in range"
    assert exact_product(FP32, FP32, FP32) == "no"
    assert FloatMultiplier(BF16, BF16, FP32).exact == "in range"


#: (unit, positional arguments, keyword arguments, the constructor's message).
BAD_PARAMETERS = [
    (FloatMultiplier, (), dict(stages=0), "Multiplier stage count must be between 1 and 6, not 0"),
    (FloatMultiplier, (), dict(stages=2.0),
     "Multiplier stage count must be an integer between 1 and 6, not 2.0"),
    (FloatMultiplier, (), dict(split="thirds"),
     "Multiplier split must be one of 'both', 'wide', 'dsp18', not 'thirds'"),
    (FloatMultiplier, (), dict(private_operands=1),
     "Multiplier private_operands must be True or False, not 1"),
    (FloatMultiplier, (), dict(operand_copy=2),
     "Multiplier operand copy must be between 0 and 1, not 2"),
    (FloatMultiplier, (), dict(block_registers=0),
     "Multiplier block_registers must be True or False, not 0"),
    (FloatMultiplier, ("fp8",), {},
     "Float format must be one of bf16, fp16, fp32 (or a FloatFormat), not 'fp8'"),
    (FloatAdder, (), dict(stages=10), "Adder stage count must be between 1 and 9, not 10"),
    (FloatAdder, (), dict(stages=3, cuts=(0, 8)),
     "Adder cuts must be 2 distinct cut indices between 0 and 7 (stages - 1), not [0, 8]"),
    (FloatAdder, (), dict(stages=3, cuts=(1,)),
     "Adder cuts must be 2 distinct cut indices between 0 and 7 (stages - 1), not [1]"),
    (FloatMultiplier, (), dict(stages=2, cuts=(True,)),
     "Multiplier cuts must be a sequence of cut indices, not (True,)"),
    (FloatAdder, (), dict(balanced="yes"), "Adder balanced must be True or False, not 'yes'"),
    (FloatAdder, ("fp8",), {},
     "Float format must be one of bf16, fp16, fp32 (or a FloatFormat), not 'fp8'"),
    (FloatConvert, (), dict(stages=3), "Conversion stage count must be between 1 and 2, not 3"),
    (FloatConvert, ("fp64",), {},
     "Float format must be one of bf16, fp16, fp32 (or a FloatFormat), not 'fp64'"),
    (IntToFloat, (40,), {}, "Integer width must be between 2 and 32, not 40"),
    (IntToFloat, (), dict(stages=5),
     "Integer conversion stage count must be between 1 and 4, not 5"),
    (FloatDot, (BF16, 12), {}, "Lane count must be a power of two between 1 and 64, not 12"),
    (FloatDot, (BF16, 128), {}, "Lane count must be a power of two between 1 and 64, not 128"),
    (FloatDot, (), dict(add_stages=0), "Adder stage count must be between 1 and 9, not 0"),
    (FloatDot, (), dict(balanced=1), "Adder balanced must be True or False, not 1"),
    (FloatMAC, (), dict(mul_stages=9), "Multiplier stage count must be between 1 and 6, not 9"),
    (FloatMAC, (), dict(add_stages=10), "Adder stage count must be between 1 and 9, not 10"),
]


@pytest.mark.parametrize("how", ["constructor", "latency_of"])
@pytest.mark.parametrize("unit, args, kwargs, message", BAD_PARAMETERS)
def test_parameter_messages(unit, args, kwargs, message, how):
    """The constructor and the latency function refuse a parameter with the same message."""
    with pytest.raises((TypeError, ValueError)) as info:
        (unit if how == "constructor" else unit.latency_of)(*args, **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize("unit, args, kwargs", [
    (FloatMultiplier, (), {}),
    *[(FloatMultiplier, fmts, dict(stages=s)) for fmts in MUL_FORMATS for s in (1, 3, 6)],
    (FloatMultiplier, (BF16, BF16, FP32), dict(stages=5, cuts=(0, 1, 2, 4), split="dsp18")),
    (FloatAdder, (), {}),
    *[(FloatAdder, (fmt,), dict(stages=s)) for fmt in (FP32, BF16, "fp16") for s in (1, 4, 9)],
    (FloatAdder, (FP32,), dict(stages=3, cuts=(0, 4), balanced=True)),
    (FloatMAC, (), {}),
    *[(FloatMAC, (i, a), dict(mul_stages=m, add_stages=s))
      for i, a in ((BF16, FP32), (FP16, FP32), (BF16, BF16)) for m, s in ((1, 1), (2, 6), (6, 9))],
    (FloatConvert, (), {}),
    *[(FloatConvert, (i, o), dict(stages=s)) for i, o in ((FP32, FP16), (BF16, FP32))
      for s in (1, 2)],
    (IntToFloat, (), {}),
    *[(IntToFloat, (bits, fmt), dict(stages=s)) for bits, fmt in ((16, BF16), (8, FP16))
      for s in (1, 4)],
    (FloatDot, (), {}),
    *[(FloatDot, (BF16, lanes), dict(mul_stages=m, add_stages=s, block_registers=True))
      for lanes in (1, 2, 16, 64) for m, s in ((1, 1), (5, 7))],
    (FloatDot, (FP16, 4, FP32), dict(balanced=True)),
])
def test_latency_of_is_the_unit_latency(unit, args, kwargs):
    """Each unit's latency function gives, without building it, what the built unit reports."""
    assert unit.latency_of(*args, **kwargs) == unit(*args, **kwargs).latency


def test_registry_rejects_bad_overrides():
    with pytest.raises(ParameterError, match="Float format must be one of bf16, fp16, fp32"):
        registry.get("arith-fpadd").parameters("default", {"fmt": "fp64"})
    with pytest.raises(ParameterError,
                       match="Lane count must be a power of two between 1 and 64, not 3"):
        registry.get("arith-fdot").parameters("default", {"lanes": "3"})


@pytest.mark.parametrize("name", ["arith-fpmul", "arith-fpadd", "arith-fpmac", "arith-fpconv",
                                  "arith-int2fp", "arith-fdot"])
def test_registry_presets_build(name):
    block = registry.get(name)
    for preset in registry.PRESETS:
        assert block.elaborate(block.parameters(preset)).latency >= 1
    assert float_format(block.parameters("paper").as_dict().get(
        "in_fmt", block.parameters("paper").as_dict().get("fmt", "fp32")))
