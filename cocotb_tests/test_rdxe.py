"""Run the rDXE VAC's and DXT's testbenches under Icarus and Verilator."""

import pytest

from .launcher import SIMULATORS, case_id, run_case

#: (block, preset, overrides, cocotb tests). The VAC: the small preset (4 lanes, 4 credits) one
#: test per case; then the corners of the other parameters: the 'full' clamp (outputs reach
#: -128), the fewest credits (3), one operand stage, a 16-bit PPU multiplier and a 16-bit RC
#: factor (a 10-bit significand). The DXT: its small preset, one build (a Verilator build of the
#: tile takes about a minute); its parameter corners are covered in process
#: (tests/test_rdxe_dxt.py).
CASES = [
    ("rdxe-vac", "small", {}, ["plain_random"]),
    ("rdxe-vac", "small", {}, ["fused_random"]),
    ("rdxe-vac", "small", {}, ["backpressure", "full_rate"]),
    ("rdxe-vac", "small", {"clamp": "full", "queue_depth": "3", "operand_stages": "1",
                           "mult_bits": "16", "rc_bits": "16"},
     ["fused_random", "backpressure"]),
    ("rdxe-dxt", "small", {}, ["random_ops", "attention_overflow", "backpressure",
                               "full_rate"]),
]


@pytest.mark.parametrize("simulator", SIMULATORS)
@pytest.mark.parametrize("case", CASES, ids=[f"{case_id(*c)}-{'+'.join(c[3])}" for c in CASES])
def test_rdxe(case, simulator):
    run_case(case, simulator)


#: The Verilog for the ECP5: the VAC's lane products, PPU and RCU and the VE's multipliers on
#: MULT18X18D blocks with their own registers (cocotb_tests/models/MULT18X18D.v).
ECP5_CASES = [
    ("rdxe-vac", "small", {}, ["fused_random", "full_rate"]),
    ("rdxe-dxt", "small", {}, ["random_ops", "full_rate"]),
]


@pytest.mark.parametrize("case", ECP5_CASES, ids=[case_id(*c) for c in ECP5_CASES])
def test_rdxe_ecp5(case):
    """Bit-exact and at the generic Verilog's cycles: ``full_rate`` checks the cycle counts
    against the cycle model."""
    run_case(case, "icarus", target="ecp5")
