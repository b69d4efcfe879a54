"""Run the rDXE VAC's and DXT's testbenches under Icarus and Verilator."""

import pytest

from .launcher import SIMULATORS, case_id, design_group, run_case

#: (block, preset, overrides, cocotb tests). The VAC: the small preset (4 lanes, 4 credits) one
#: test per case; then the corners of the other parameters: the 'full' clamp (outputs reach
#: -128), the fewest credits (3), one operand stage, a 16-bit PPU multiplier and a 16-bit RC
#: factor (a 10-bit significand). The DXT: its small preset, one build (a Verilator build of the
#: tile takes about a minute); its parameter corners are covered in process
#: (tests/test_rdxe_dxt.py).
CASES = [
    ("rdxe-vac", "small", {}, ["plain_random", "fused_random", "backpressure", "full_rate"]),
    ("rdxe-vac", "small", {"clamp": "full", "queue_depth": "3", "operand_stages": "1",
                           "mult_bits": "16", "rc_bits": "16"},
     ["fused_random", "backpressure"]),
    ("rdxe-dxt", "small", {}, ["random_ops", "attention_overflow", "backpressure",
                               "full_rate"]),
]


#: Under Verilator with --slow (make test-all): the DXT's cold build and run take 53 s in make test
#: against 22 s under Icarus, the VAC's 8 to 21 s against 7 to 13 s; the Icarus run is the same
#: testbench on the same Verilog (launcher.case_runs). The VAC's small preset runs its four
#: tests in one simulation (three runs of one build cost 6 to 8 s more).
RUNS = [pytest.param(case, sim, id=f"{case_id(*case)}-{'+'.join(case[3])}-{sim}",
                     marks=[pytest.mark.slow] if sim == "verilator" else [design_group(*case[:3])])
        for case in CASES for sim in SIMULATORS]


@pytest.mark.parametrize("case, simulator", RUNS)
def test_rdxe(case, simulator):
    run_case(case, simulator)


#: The Verilog for the ECP5: the VAC's lane products, PPU and RCU and the VE's multipliers on
#: MULT18X18D blocks with their own registers (cocotb_tests/models/MULT18X18D.v).
ECP5_CASES = [
    ("rdxe-vac", "small", {}, ["fused_random", "full_rate"]),
    ("rdxe-dxt", "small", {}, ["random_ops", "full_rate"]),
]


# With --slow: covered in make test by the generic Verilog's runs (test_rdxe) and, at a smaller
# size, by the ECP5 cases of the units it instantiates on MULT18X18D blocks (IntDot, Requantizer,
# Exp2, Reciprocal, RSqrt, FloatMultiplier: test_arith_int_ecp5, test_arith_func_ecp5,
# test_arith_float_ecp5); 30 s (DXT) and 9 s (VAC) of a cold make test.
@pytest.mark.slow
@pytest.mark.parametrize("case", ECP5_CASES, ids=[case_id(*c) for c in ECP5_CASES])
def test_rdxe_ecp5(case):
    """Bit-exact and at the generic Verilog's cycles: ``full_rate`` checks the cycle counts
    against the cycle model."""
    run_case(case, "icarus", target="ecp5")
