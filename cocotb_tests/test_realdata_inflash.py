"""Real SmolLM2 data through the in-flash PE's Verilog (issue 41): the ``kvnand`` back-end's
``w4a16`` GEMV of a projection's Q4_1 blocks on its real fp16 activation, and Logit and Attend of
one KV group's three query heads over the layer's real fp16 KV pages, on ``inflash`` under Icarus
and Verilator; every output equals the back-end's codes and the RTL cycles equal the cycle
model's (cocotb_tests/realdata/inflash.py has the runs and the PE's parameters)."""

from __future__ import annotations

import pytest

from cocotb_tests.realdata import check_case

from .launcher import SIMULATORS, simulator_runs

#: make test: layer 0 at position 4 (5 tokens in the cache, a KV page partly filled), attn_q
#: row 0 (18 Q4_1 records, one page) and KV group 0's Logit and Attend: about 1,450 cycles at
#: full rate, 1,600 under random stimulus.
#: At full rate only (no stalled pass, cocotb_tests/realdata): the --slow cases repeat their ops
#: under idle cycles and back-pressure, which the block's random cases check in make test.
SMALL = {"layer": 0, "position": 4, "ops": ["attn_q", "logit", "attend"], "rows": 1,
         "kv_groups": [0]}
#: --slow: the issue's case at position 64 (65 tokens, three KV pages per head): layer 0's
#: whole attn_q (576 x 576, 51 pages) and KV group 0's Logit and Attend.
FULL = {"layer": 0, "position": 64, "ops": ["attn_q", "logit", "attend"], "kv_groups": [0]}


#: Verilator with --slow: the PE at F = 8 with 2048 columns is a C++ build of its own (about
#: two minutes of CPU; no other make-test case builds it); the Icarus run checks the same
#: Verilog in make test.
@pytest.mark.parametrize("simulator", simulator_runs())
def test_realdata_inflash_small(simulator):
    """Layer 0, position 4: attn_q row 0, KV group 0's Logit and Attend: bit-exact, RTL cycles
    == model cycles."""
    check_case("inflash", SMALL, simulator, stalled=False)


#: The issue's size (about 60k cycles, most of them attn_q's 51 pages streaming);
#: test_realdata_inflash_small runs the same runner on the same PE in make test.
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_realdata_inflash_full(simulator):
    """Layer 0, position 64: attn_q 576 x 576 and KV group 0's three heads over 65 tokens."""
    check_case("inflash", FULL, simulator)
