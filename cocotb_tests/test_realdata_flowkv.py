"""Real SmolLM2 data through the FlowKV blocks (issue 41): the attention of one decode step of
the ``flowkv`` back-end on the tile pair (one step per KV head) and on the array (one pair per
KV head), under Icarus and Verilator; every output equals the back-end's bf16 attention output
and the RTL cycles equal :func:`sim.flowkv.step_cycles` (cocotb_tests/realdata/flowkv.py has the
runs)."""

from __future__ import annotations

import pytest

from cocotb_tests.realdata import check_case

from .launcher import SIMULATORS

#: make test: layer 3's KV head 0 at position 16 on the pair (17 rows: a whole chunk and one row;
#: 98 % of the weight on position 0, the attention sink SmolLM2 has from layer 3 on). Layer 3
#: keeps the case's capture to four layers of the back-end.
SMALL = {"layer": 3, "position": 16, "kv_heads": [0], "step": False}
#: --slow: layer 18, the widest score span at position 64 (KV head 2: 63 log2 units, all but
#: 3e-8 of head 8's weight on position 0), the whole step (65 rows, five chunks): every KV head on
#: the pair, then all nine heads on the array of three pairs.
FULL = {"layer": 18, "position": 64}


#: Verilator with --slow: the pair at d = 64, G = 3 is a C++ build of its own (no other make-test
#: case has that size); test_realdata_flowkv_small under Icarus runs the same Verilog in make test.
@pytest.mark.parametrize("simulator", [
    pytest.param(s, marks=[pytest.mark.slow] if s == "verilator" else []) for s in SIMULATORS])
def test_realdata_flowkv_small(simulator):
    """Layer 3, position 16, KV head 0 on the pair: bit-exact, RTL cycles == model cycles."""
    check_case("flowkv", SMALL, simulator)


#: The full step (three pair steps and the array's: 18k cycles, the array's builds);
#: test_realdata_flowkv_small runs the same runner on the same pair in make test.
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_realdata_flowkv_full(simulator):
    """Layer 18, position 64: nine heads over three KV heads on the pair and on the array."""
    check_case("flowkv", FULL, simulator)
