"""Run the FlowKV testbenches under Icarus and Verilator."""

import pytest

from memwall import registry

from .launcher import case_id, case_runs, run_block, run_case

ALL = ["random_jobs", "corner_cases", "refused", "full_rate"]
#: (block, preset, overrides, cocotb tests): GQA with bf16 output at the small preset; MHA with
#: fp32 output, one lane and longer chunks; d / P = 16 (both tiles at full rate); the array, MHA
#: and GQA.
CASES = [
    ("flowkv", "small", {}, ALL),
    ("flowkv", "small", {"group": "1", "lanes": "1", "chunk": "8", "out_fmt": "fp32"},
     ["random_jobs", "corner_cases", "refused"]),
    ("flowkv", "small", {"head_dim": "32", "lanes": "2", "chunk": "8"}, ["full_rate"]),
    ("flowkv-array", "small", {}, ["random_jobs"]),
    # The array with GQA (its small preset is MHA): pairs of two heads, with --slow, and the
    # array's corner cases and refusals (the pair's run in make test: flowkv-small).
    ("flowkv-array", "small", {"group": "2"}, ["random_jobs", "corner_cases", "refused"]),
]


# With --slow: covered in make test by the generic Verilog's run (test_flowkv) and, at a smaller
# size, by the ECP5 cases of the units whose multipliers it instantiates (FloatDot and
# FloatMultiplier: test_arith_float_ecp5); 32 s of a cold make test.
@pytest.mark.slow
def test_flowkv_ecp5():
    """The pair's Verilog for the ECP5 (its multipliers on MULT18X18D blocks with their own
    registers, cocotb_tests/models/MULT18X18D.v), bit-exact and at the same cycles as the generic
    Verilog: ``full_rate`` checks the cycle counts against the cycle model."""
    run_block("flowkv", registry.get("flowkv").parameters("small"), "icarus", testcase=ALL,
              target="ecp5")


#: Every case runs under Verilator with --slow (42 s for flowkv-small's cold build and run in make
#: test, 70 to 130 s for the variants and the array, against 14 to 21 s under Icarus), under
#: Icarus in make test: the same testbench on the same Verilog (launcher.case_runs). Only with
#: --slow: the array with GQA (its pair per head is flowkv-small's), and the MHA pair with one
#: lane and fp32 output (21 s), whose results tests/test_flowkv_hdl.py checks in make test on a
#: pair with one lane, fp32 output and another chunk length, flowkv-array-small on MHA pairs;
#: d / P = 16 at full rate (19 s), whose cycles tests/test_sim_flowkv.py's
#: test_step_cycles_predict_the_rtl checks on the same pair in Amaranth's simulator (flowkv-small's
#: full_rate runs the Verilog at full rate in make test).
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES},
                 slow={case_id(*CASES[1]), case_id(*CASES[2]), case_id(*CASES[4])})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_flowkv(case, simulator):
    run_case(case, simulator)
