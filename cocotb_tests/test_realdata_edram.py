"""Real SmolLM2 data through the SHIELD eDRAM controller (issue 41): the BF16 Q, K, V and O of one
decode step of the ``shield`` back-end written, held through refresh and read back, under Icarus
and Verilator; every word equals what the back-end's ``keep`` returned, errors included, and the
RTL cycles equal the cycle model (cocotb_tests/realdata/edram.py has the runs)."""

from __future__ import annotations

import pytest

from cocotb_tests.realdata import check_case

from .launcher import SIMULATORS, simulator_runs

#: make test: layer 0 at position 8 under SHIELD alone, the four tensors (1536 words, the
#: seeded injection drew 2 bit errors in Q and 2 in O): one edram run.
SMALL = {"layer": 0, "position": 8, "policies": ["shield"]}
#: --slow: layer 2 at position 64, every policy (12 ops: edram for shield and kelle, whose draws
#: hit Q, V and O, and K and V; edram-fpga for standard).
FULL = {"layer": 2, "position": 64}


#: Verilator with --slow (the rule of launcher.case_runs): the Icarus run checks the same Verilog
#: with the same testbench in make test.
@pytest.mark.parametrize("simulator", simulator_runs())
def test_realdata_edram_small(simulator):
    """Layer 0, position 8, SHIELD: Q, K, V, O bit-exact with their drawn errors."""
    check_case("edram", SMALL, simulator)


#: The full step under every policy (about 30k cycles); test_realdata_edram_small runs the same
#: runner and harness on the same geometry under SHIELD in make test.
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_realdata_edram_full(simulator):
    """Layer 2, position 64, every policy: 12 ops bit-exact, RTL cycles == model cycles."""
    check_case("edram", FULL, simulator)
