# amaranth: UnusedElaboratable=no
# (components built here only to check their parameter validation are never elaborated)
"""exp2, reciprocal and rsqrt RTL: pinned parameter messages, latency formulas, tables against
the golden model's, and bit-exact runs in Amaranth's simulator at every iteration count and
pipeline depth (with bubbles in the valid stream), which the cocotb runs sample only in part."""

import re

import numpy as np
import pytest

from golden.arith import func as g
from hdl.arith import exp2 as exp2_hdl
from hdl.arith import recip as recip_hdl
from hdl.arith.exp2 import Exp2
from hdl.arith.recip import RSqrt, Reciprocal
from memwall import registry
from memwall.params import ParameterError
from .pipeline_sim import run_pipeline


def exact(message):
    return "^" + re.escape(message) + "$"


# ------------------------------------------------------------------------------------------------
# Parameters


@pytest.mark.parametrize("unit, kwargs, kind, message", [
    (Exp2, dict(table_bits=3), ValueError,
     "Exp2 table index bits must be between 4 and 10, not 3"),
    (Exp2, dict(table_bits=11), ValueError,
     "Exp2 table index bits must be between 4 and 10, not 11"),
    (Exp2, dict(table_bits="7"), TypeError,
     "Exp2 table index bits must be an integer between 4 and 10, not '7'"),
    (Exp2, dict(stages=0), ValueError, "Exp2 pipeline stages must be between 1 and 9, not 0"),
    (Exp2, dict(stages=10), ValueError, "Exp2 pipeline stages must be between 1 and 9, not 10"),
    (Exp2, dict(stages=2.0), TypeError,
     "Exp2 pipeline stages must be an integer between 1 and 9, not 2.0"),
    (Exp2, dict(block_registers=1), TypeError,
     "Exp2 block_registers must be True or False, not 1"),
    (Reciprocal, dict(iterations=4), ValueError,
     "Reciprocal Newton-Raphson iteration count must be between 0 and 3, not 4"),
    (Reciprocal, dict(iterations=True), TypeError,
     "Reciprocal Newton-Raphson iteration count must be an integer between 0 and 3, not True"),
    (RSqrt, dict(iterations=-1), ValueError,
     "RSqrt Newton-Raphson iteration count must be between 0 and 3, not -1"),
    (RSqrt, dict(block_registers="no"), TypeError,
     "RSqrt block_registers must be True or False, not 'no'"),
    (Reciprocal, dict(round_register=1), TypeError,
     "Reciprocal round_register must be True or False, not 1"),
    (RSqrt, dict(land_products="yes"), TypeError,
     "RSqrt land_products must be True or False, not 'yes'"),
    (Reciprocal, dict(narrow_in_logic="no"), TypeError,
     "Reciprocal narrow_in_logic must be True or False, not 'no'"),
])
@pytest.mark.parametrize("how", ["constructor", "latency_of"])
def test_parameter_messages(unit, kwargs, kind, message, how):
    """The constructor and the latency function refuse a parameter with the same message."""
    with pytest.raises(kind, match=exact(message)):
        (unit if how == "constructor" else unit.latency_of)(**kwargs)


@pytest.mark.parametrize("unit, kwargs", [
    (Exp2, {}), (Exp2, dict(table_bits=4)), (Exp2, dict(table_bits=10)),
    *[(Exp2, dict(stages=s, block_registers=b)) for s in (1, 5, 9) for b in (False, True)],
    *[(unit, dict(iterations=n, block_registers=b)) for unit in (Reciprocal, RSqrt)
      for n in range(4) for b in (False, True)],
    (Reciprocal, {}), (RSqrt, {}),
    (Reciprocal, dict(round_register=True)), (RSqrt, dict(round_register=True)),
    *[(unit, dict(iterations=n, land_products=True, round_register=r))
      for unit in (Reciprocal, RSqrt) for n in range(4) for r in (False, True)],
])
def test_latency_of_is_the_unit_latency(unit, kwargs):
    """The nearest accepted value of each refused one builds, and each unit's latency function
    gives, without building it, what the built unit reports."""
    assert unit.latency_of(**kwargs) == unit(**kwargs).latency


@pytest.mark.parametrize("block, name, value, message", [
    ("arith-recip", "iterations", "5",
     "Reciprocal Newton-Raphson iteration count must be between 0 and 3, not 5"),
    ("arith-rsqrt", "iterations", "x", "parameter iterations takes an integer, not 'x'"),
    ("arith-exp2", "stages", "10", "Exp2 pipeline stages must be between 1 and 9, not 10"),
])
def test_registry_messages(block, name, value, message):
    with pytest.raises(ParameterError, match=exact(message)):
        registry.get(block).parameters("default", {name: value})


@pytest.mark.parametrize("stages", range(1, 10))
def test_exp2_latency(stages):
    assert Exp2.latency_of(stages=stages) == stages


@pytest.mark.parametrize("iterations", range(4))
def test_newton_latency(iterations):
    assert Reciprocal.latency_of(iterations=iterations) == 4 + 4 * iterations
    assert RSqrt.latency_of(iterations=iterations) == 4 + 6 * iterations
    assert Reciprocal.latency_of(iterations=iterations, round_register=True) == 5 + 4 * iterations
    # Landed products: two cycles more per multiply, two multiplies a step (three for rsqrt).
    assert Reciprocal.latency_of(iterations=iterations, land_products=True) == 4 + 8 * iterations
    assert RSqrt.latency_of(iterations=iterations, land_products=True) == 4 + 12 * iterations


# ------------------------------------------------------------------------------------------------
# Tables: the RTL builds its own; they must equal the golden model's


@pytest.mark.parametrize("bits", range(4, 11))
def test_exp2_tables_match_golden(bits):
    c0, c1 = exp2_hdl.exp2_tables(bits)
    g0, g1 = g.exp2_tables(bits)
    assert c0 == [int(v) for v in g0] and c1 == [int(v) for v in g1]


def test_seed_tables_match_golden():
    assert recip_hdl.recip_seeds() == [int(v) for v in g.recip_seeds()]
    assert recip_hdl.rsqrt_seeds() == [[int(v) for v in row] for row in g.rsqrt_seeds()]
    assert (recip_hdl.SEED_BITS, recip_hdl.SEED_FRAC, recip_hdl.NR_FRAC) == \
        (g.SEED_BITS, g.SEED_FRAC, g.NR_FRAC)


# ------------------------------------------------------------------------------------------------
# Amaranth simulation, bit for bit against the golden model


SPECIALS = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
            0x7F800001, 0xFFFFFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000,
            0x43000000, 0x42FFFFFF, 0xC2FC0000, 0xC2FC0001, 0x7E800000, 0x7E800001, 0x40000000,
            0x40800000]




def stimulus(count=400, seed=3, exp2=False):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
    if exp2:
        codes[::2] = rng.uniform(-130, 130, count // 2).astype(np.float32).view(np.uint32)
    return np.concatenate([np.array(SPECIALS, dtype=np.uint32), codes])


@pytest.mark.parametrize("table_bits, stages", [(7, s) for s in range(1, 10)] + [(4, 3), (10, 7)])
def test_exp2_simulation(table_bits, stages):
    unit = Exp2(table_bits=table_bits, stages=stages)
    codes = stimulus(exp2=True)
    run = run_pipeline(unit, [{"x": int(c)} for c in codes], seed=1)
    got, latency = np.array(run.outputs, dtype=np.uint32), run.delays
    want = g.exp2(codes, table_bits)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [(hex(codes[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    assert (latency == unit.latency).all()


@pytest.mark.parametrize("unit_class, golden", [(Reciprocal, g.reciprocal), (RSqrt, g.rsqrt)])
@pytest.mark.parametrize("iterations, round_register, land, narrow",
                         [(n, False, False, False) for n in range(4)]
                         + [(2, True, False, False), (1, False, True, False),
                            (2, True, True, False), (1, False, False, True),
                            (2, False, False, True), (2, True, True, True)])
def test_newton_simulation(unit_class, golden, iterations, round_register, land, narrow):
    """Every bit against the golden; ``narrow_in_logic`` computes the narrow partial products
    in logic (the DXE controller's reciprocals)."""
    unit = unit_class(iterations=iterations, round_register=round_register, land_products=land,
                      narrow_in_logic=narrow)
    codes = stimulus()
    run = run_pipeline(unit, [{"x": int(c)} for c in codes], seed=1)
    got, latency = np.array(run.outputs, dtype=np.uint32), run.delays
    want = golden(codes, iterations)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [(hex(codes[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]
    assert (latency == unit.latency).all()
