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
#: (launcher.case_runs). Under Icarus the default requantizer and the default and 64-lane dot
#: products run with --slow too: the unsigned requantizer has the same 32 x 32 partial products
#: (and the small one the symmetric clamp), the small dot product the same lane and tree logic,
#: in make test; every width, depth, lane count and register spacing runs in-process there.
SLOW = {case_id(*CASES[1]), case_id(*CASES[4]), case_id(*CASES[5])}
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES}, slow=SLOW)


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
    ("arith-requant", "paper", {**BLOCKS, "mult_signed": "false", "stages": "7"}),
    ("arith-idot", "small", BLOCKS),
]


#: The unsigned 3-stage requantizer runs with --slow: the 7-stage one (the VAC's PPU and RCU,
#: hdl/rdxe/vac.py, the operands in the blocks' input registers) places the same unsigned pieces
#: on the same blocks in make test. The signed
#: default too: the 6-stage one runs the same mapping (x's signed top slice on SIGNEDA), and
#: signed x signed products run on the blocks in the dot product's case.
@pytest.mark.parametrize("case", [pytest.param(c, id=f"{case_id(*c)}-ecp5",
                                               marks=[pytest.mark.slow] if c is not ECP5_CASES[2]
                                               and c is not ECP5_CASES[3] else [])
                                  for c in ECP5_CASES])
def test_arith_int_ecp5(case):
    run_case(case, "icarus", target="ecp5")


#: The VAC's RCU as the DXE builds it (docs/rdxe.md 14.2): INT32 x a 19-bit unsigned multiplier
#: with ``narrow_in_logic``, its two pieces with the 2-bit top slice in logic beside the two on
#: blocks (the same cut and bits: the generic path's in-process test is
#: tests/test_arith_int_requant.py::test_narrow_in_logic_matches_golden).
NARROW_CASE = ("arith-requant", "paper", {**BLOCKS, "mult_signed": "false", "stages": "7",
                                          "mult_bits": "19", "out_bits": "32",
                                          "narrow_in_logic": "true"})


def test_arith_int_ecp5_narrow():
    run_case(NARROW_CASE, "icarus", target="ecp5")
