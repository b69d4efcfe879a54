# amaranth: UnusedElaboratable=no
# (components built here only to check their parameter validation are never elaborated)
"""Floating-point units in Amaranth's simulator against the golden models, at every stage count
and several format pairs, with bubbles in the valid stream; latency formulas; pinned parameter
messages."""

import numpy as np
import pytest
from amaranth import Module, Signal
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


MUL_FORMATS = [(FP32, FP32, FP32), (BF16, BF16, FP32), (FP16, FP16, FP32), (BF16, BF16, BF16),
               (FP16, FP16, FP16), (FP32, FP32, BF16), (FP16, BF16, FP16)]


@pytest.mark.parametrize("stages", range(1, 7))
@pytest.mark.parametrize("fmts", MUL_FORMATS, ids=lambda f: "x".join(map(str, f)))
def test_multiplier(fmts, stages):
    a, b = operand_pairs(np.random.default_rng(SEED + stages), fmts[0], fmts[1],
                         _randoms(800, stages, FloatMultiplier().stages))
    check(FloatMultiplier(*fmts, stages=stages), [{"a": x, "b": y} for x, y in zip(a, b)],
          fmul(a, b, *fmts))


# The DSP-placement options (pieces of at most 18 bits, a private operand copy per piece) change
# no result bit; stages 4 and up register the copies (the second operand copy inverts their
# power-on values).
@pytest.mark.parametrize("copy", [0, 1])
@pytest.mark.parametrize("stages", [3, 4, 6])
@pytest.mark.parametrize("fmts", [(FP32, FP32, FP32), (FP32, BF16, FP32), (BF16, BF16, FP32)],
                         ids=lambda f: "x".join(map(str, f)))
def test_multiplier_split_private(fmts, stages, copy):
    a, b = operand_pairs(np.random.default_rng(SEED + 10 + stages), fmts[0], fmts[1], 800)
    check(FloatMultiplier(*fmts, stages=stages, split="wide", private_operands=True,
                          operand_copy=copy),
          [{"a": x, "b": y} for x, y in zip(a, b)], fmul(a, b, *fmts))


@pytest.mark.parametrize("stages", range(1, 10))
@pytest.mark.parametrize("fmt", [FP32, BF16, FP16], ids=str)
def test_adder(fmt, stages):
    a, b = operand_pairs(np.random.default_rng(SEED + stages), fmt, fmt,
                         _randoms(1200, stages, FloatAdder().stages), add=True)
    check(FloatAdder(fmt, stages=stages), [{"a": x, "b": y} for x, y in zip(a, b)],
          fadd(a, b, fmt))


# Shallower alignment and normalization logic, and cut points chosen explicitly: same results.
@pytest.mark.parametrize("stages, cuts", [(1, None), (3, (2, 5)), (8, (0, 1, 3, 4, 5, 6, 7)),
                                          (9, None)])
@pytest.mark.parametrize("fmt", [FP32, BF16, FP16], ids=str)
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


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("in_fmt, out_fmt", [(FP32, BF16), (FP32, FP16), (BF16, FP32),
                                             (FP16, FP32), (FP16, BF16)],
                         ids=lambda f: str(f))
def test_convert(in_fmt, out_fmt, stages):
    rng = np.random.default_rng(SEED)
    x = np.concatenate([random_codes(rng, in_fmt, 1000),
                        random_codes(rng, in_fmt, 1000, exp_spread=out_fmt.bias + 2)])
    check(FloatConvert(in_fmt, out_fmt, stages=stages), [{"x": v} for v in x],
          fconvert(x, in_fmt, out_fmt))


@pytest.mark.parametrize("stages", range(1, 5))
@pytest.mark.parametrize("bits, fmt", [(32, FP32), (16, BF16), (32, FP16), (8, FP32), (2, FP16)],
                         ids=lambda v: str(v))
def test_int_to_float(bits, fmt, stages):
    rng = np.random.default_rng(SEED)
    mask = (1 << bits) - 1
    x = [0, 1, mask, 1 << (bits - 1), (1 << (bits - 1)) - 1]
    x += [int(v) for v in rng.integers(0, 1 << bits, 1000, dtype=np.uint64)]
    x += [int(rng.integers(0, 1 << int(k))) & mask for k in rng.integers(1, bits, 500)]
    x += [(-int(rng.integers(0, 1 << int(k)))) & mask for k in rng.integers(1, bits, 500)]
    check(IntToFloat(bits, fmt, stages=stages), [{"x": v} for v in x],
          int_to_float(x, bits, fmt))


@pytest.mark.parametrize("lanes", [1, 2, 4, 16])
@pytest.mark.parametrize("in_fmt", [BF16, FP16], ids=str)
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
