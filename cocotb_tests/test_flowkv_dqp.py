"""Run FusedDQP's testbench (cocotb_tests/flowkv/dqp_tb.py) under Icarus and Verilator."""

import pytest

from memwall import registry

from .launcher import case_id, case_runs, run_block, run_case

ALL = ["random_jobs", "corner_cases", "full_rate"]
#: (block, preset, overrides, cocotb tests): 8 lanes (four beats a record, the serial tree over
#: beats in use) at the small preset.
CASES = [
    ("flowkv-dqp", "small", {}, ALL),
]
#: Icarus in make test (28 s here, the build included); Verilator with --slow (a cold C++ build
#: of one to two minutes for a 4 s run): the same testbench on the same Verilog.
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_flowkv_dqp(case, simulator):
    run_case(case, simulator)


# With --slow: covered in make test by the generic Verilog's run (test_flowkv_dqp) and, at a
# smaller size, by the ECP5 cases of the units whose multipliers it instantiates (FloatMultiplier,
# FloatDot: test_arith_float_ecp5); 24 s of a cold make test.
@pytest.mark.slow
def test_flowkv_dqp_ecp5():
    """The engine's Verilog for the ECP5 (the dequantizer's and the dot product's multipliers on
    MULT18X18D blocks with their own registers, cocotb_tests/models/MULT18X18D.v): bit-exact,
    and ``full_rate`` holds it to the cycle model's cycles."""
    run_block("flowkv-dqp", registry.get("flowkv-dqp").parameters("small"), "icarus",
              testcase=ALL, target="ecp5")
