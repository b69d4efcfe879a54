"""Run the fp32 function-unit testbenches (exp2, reciprocal, rsqrt) under Icarus and Verilator."""

import pytest

from .launcher import case_id, case_runs, run_case

#: (block, preset, overrides): each unit at its default (the accuracy target), exp2 with the
#: smallest table and no inner registers, rsqrt with the most steps (the narrowest error term).
#: The other iteration counts run in Amaranth's simulator (tests/test_arith_func_hdl.py).
CASES = [
    ("arith-exp2", "default", {}),
    ("arith-exp2", "small", {}),
    ("arith-recip", "default", {}),
    ("arith-rsqrt", "default", {}),
    ("arith-rsqrt", "default", {"iterations": "3"}),
]


#: The same testbenches on the Verilog written for the ECP5 with ``block_registers``: exp2's
#: multiply and every Newton-Raphson partial product (signed and unsigned slices) on MULT18X18D
#: blocks whose output register is the product register (cocotb_tests/models/MULT18X18D.v);
#: rsqrt's with ``land_products``, the blocks' input registers too.
BLOCKS = {"block_registers": "true"}
ECP5_CASES = [
    ("arith-exp2", "default", BLOCKS),
    ("arith-recip", "default", BLOCKS),
    ("arith-rsqrt", "default", {**BLOCKS, "iterations": "3", "land_products": "true"}),
]


#: Under Verilator every case runs with --slow (make test-all): each is a cold C++ build of 9 to
#: 17 s in make test, and its Icarus run there is the same testbench on the same Verilog
#: (launcher.case_runs). Under Icarus the small exp2 and the 3-step rsqrt run with --slow too:
#: every table size, depth and iteration count runs in Amaranth's simulator in make test
#: (tests/test_arith_func_hdl.py), and the 3-step rsqrt's Verilog in its ECP5 case below.
SLOW = {case_id(*CASES[1]), case_id(*CASES[4])}
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES}, slow=SLOW)


@pytest.mark.parametrize("case, simulator", RUNS)
def test_arith_func(case, simulator):
    run_case(case, simulator)


#: The reciprocal's runs with --slow: the rsqrt's places the same Newton-Raphson partial
#: products (hdl/arith/recip.py, one mapping for both units) on the blocks in make test.
@pytest.mark.parametrize("case", [pytest.param(c, id=f"{case_id(*c)}-ecp5",
                                               marks=[pytest.mark.slow] if c is ECP5_CASES[1]
                                               else []) for c in ECP5_CASES])
def test_arith_func_ecp5(case):
    run_case(case, "icarus", target="ecp5")
