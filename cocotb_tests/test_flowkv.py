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
    ("flowkv-array", "small", {}, ["random_jobs", "corner_cases", "refused"]),
    # The array with GQA (its small preset is MHA): pairs of two heads, with --slow.
    ("flowkv-array", "small", {"group": "2"}, ["random_jobs"]),
]


def test_flowkv_ecp5():
    """The pair's Verilog for the ECP5 (its multipliers on MULT18X18D blocks with their own
    registers, cocotb_tests/models/MULT18X18D.v), bit-exact and at the same cycles as the generic
    Verilog: ``full_rate`` checks the cycle counts against the cycle model."""
    run_block("flowkv", registry.get("flowkv").parameters("small"), "icarus", testcase=ALL,
              target="ecp5")


#: The two variants and the array run under Verilator with --slow (70 to 130 s each in make test,
#: mostly the C++ build; the array is flowkv-small's pair per head); under Icarus in make test.
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES[1:]},
                 slow={case_id(*CASES[4])})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_flowkv(case, simulator):
    run_case(case, simulator)
