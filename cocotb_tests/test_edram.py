"""Run the SHIELD eDRAM testbenches under Icarus and Verilator."""

import pytest

from memwall import registry

from .launcher import SIMULATORS, case_id, case_runs, run_block, run_case

#: (block, preset, overrides, cocotb tests). The bare controller with the behavioural macros at the
#: small geometry and at one bank with the smallest slack (every pending refresh forced as soon as
#: admission can make room for it); the FPGA stand-in system, with KV and QO refreshes forced by
#: a busy bank.
EXACT = ["random_traffic", "scripted_refresh_counts", "full_rate"]
CASES = [
    ("edram", "small", {}, EXACT),
    ("edram", "small", {"banks": "1", "rows": "4", "cols": "2", "slack": "4",
                        "policy": "standard"}, EXACT),
    ("edram-fpga", "small", {}, ["random_traffic", "full_rate", "forced_refresh"]),
]

#: Decay: more cells for statistics; 4 MHz keeps T_std = 180 cycles above the 32-row sweep.
DECAY = {"banks": "4", "rows": "32", "cols": "64", "clk_mhz": "4"}


#: Under Verilator with --slow (make test-all): a cold C++ build of 22 to 35 s each in make test,
#: against 8 to 14 s for the Icarus run, which is the same testbench on the same Verilog
#: (launcher.case_runs).
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_edram(case, simulator):
    run_case(case, simulator)


#: A long run (65 s of a cold make test under Verilator, most of it the testbench's Python over
#: 40,000 cycles; 59 s under Icarus): with --slow. In make test the controller under decay is
#: cocotb_tests/test_realdata_edram.py's small case (SHIELD on real Q, K, V and O with scripted
#: cell losses: every word as the back-end kept it), and every test_edram case checks each row's
#: age at every restore and the refresh counts; what only this run checks is the random
#: retention draws' error counts against the model's band (docs/verification.md).
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_edram_decay(simulator):
    """Retention decay under SHIELD: std clean, mantissa errors as the model predicts."""
    params = registry.get("edram").parameters("small", DECAY)
    run_block("edram", params, simulator, testcase="decay_shield",
              extra_env={"MEMWALL_EDRAM_DECAY": "1"})


# The negative control checks the testbench's error detector, not the RTL under a second
# simulator (test_edram_decay runs the same RTL and checks under both): Icarus only, which saves
# a Verilator build (about 35 s of the suite's CPU). With --slow, as test_edram_decay, which
# checks that decay is on and its mantissa error counts fall in the model's band; this shows the
# standard segment's errors at the relaxed interval.
@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["icarus"])
def test_edram_decay_broken_policy(simulator):
    """The same test with the standard segment on the relaxed interval finds exponent errors."""
    params = registry.get("edram").parameters("small", {**DECAY, "t_std_us": "1216"})
    run_block("edram", params, simulator, testcase="decay_broken_policy",
              extra_env={"MEMWALL_EDRAM_DECAY": "1"})
