"""Run the integer arithmetic testbenches (requantizer, integer dot product) under Icarus and
Verilator for several parameter sets."""

import pytest

from .launcher import case_id, case_runs, run_case

#: (block, preset, overrides): the small and default presets; the requantizer with an unsigned
#: multiplier, a 4-bit full-range output and 3 stages; the dot product with 64 lanes of int8 x int4,
#: the tightest accumulator (18 bits) and registers every other tree level. Every pipeline depth,
#: 1 lane and more widths are simulated in-process (tests/test_arith_int_*.py); each case here
#: costs a Verilator compile (~10-20 s), so the list is kept short.
CASES = [
    ("arith-requant", "small", {}),
    ("arith-requant", "default", {}),
    ("arith-requant", "paper", {"mult_signed": "false", "stages": "3", "out_bits": "4"}),
    ("arith-idot", "small", {}),
    ("arith-idot", "default", {}),
    ("arith-idot", "paper", {"lanes": "64", "acc_bits": "18", "register_every": "2"}),
]


#: Under Verilator every case runs with --slow (make test-all): each is a cold C++ build of 8 to
#: 17 s in make test, and its Icarus run there is the same testbench on the same Verilog
#: (launcher.case_runs).
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_arith_int(case, simulator):
    run_case(case, simulator)


#: The same testbenches on the Verilog written for the ECP5 with ``block_registers``: the
#: requantizer's partial products (signed and unsigned pieces) and the dot product's lane
#: products on MULT18X18D blocks whose output register is the product register, simulated by
#: cocotb_tests/models/MULT18X18D.v.
BLOCKS = {"block_registers": "true"}
ECP5_CASES = [
    ("arith-requant", "default", BLOCKS),
    ("arith-requant", "paper", {**BLOCKS, "mult_signed": "false", "stages": "3"}),
    ("arith-requant", "paper", {**BLOCKS, "mult_signed": "false", "stages": "6"}),
    ("arith-idot", "small", BLOCKS),
]


#: The unsigned 3-stage requantizer runs with --slow: the 6-stage one (the VAC's RCU,
#: hdl/rdxe/vac.py) places the same unsigned pieces on the same blocks in make test.
@pytest.mark.parametrize("case", [pytest.param(c, id=f"{case_id(*c)}-ecp5",
                                               marks=[pytest.mark.slow] if c is ECP5_CASES[1]
                                               else []) for c in ECP5_CASES])
def test_arith_int_ecp5(case):
    run_case(case, "icarus", target="ecp5")
