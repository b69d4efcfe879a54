"""Run the in-flash PE's testbench (GEMV, Logit, Attend) under Icarus and Verilator."""

import pytest

from memwall import registry

from .launcher import case_id, case_runs, run_block, run_case

ALL = ["random_gemvs", "corner_cases", "refused", "full_rate"]
#: Logit and Attend on KV pages (the small preset).
ATTENTION = ["random_attention", "attention_refusals", "attention_pipeline"]
#: (block, preset, overrides, cocotb tests). The small preset is read-bound (tR 40 cycles, a
#: page in 16 transfers and 16 fp16 beats); F = 1 with tR = 20 cycles is compute-bound; one byte
#: per cycle is transfer-bound (64 cycles a page); F = 16 with 16-byte words and 128-byte pages
#: (its attention: results bit for bit with idle cycles and back-pressure; the cycle counts at
#: F = 16 are tests/test_inflash_hdl.py's test_attention_timing, attention_pipeline's 76 s here
#: ran them again on the same design).
CASES = [
    ("inflash", "small", {}, ALL + ATTENTION),
    ("inflash", "small", {"fmacs": "1", "tR_us": "0.05"}, ["random_gemvs", "full_rate"]),
    ("inflash", "small", {"transfer_bytes": "1", "fmacs": "4"},
     ["random_gemvs", "full_rate", "attention_pipeline"]),
    ("inflash", "small", {"fmacs": "16", "transfer_bytes": "16", "page_bytes": "128"},
     ["random_gemvs", "corner_cases", "full_rate", "random_attention"]),
    # The PE and the KV page writer on one flash port (programs with tP busy), and the PE's
    # GEMVs and refusals through the unit's ports.
    ("inflash-unit", "small", {}, ["kv_write_read", "kv_overflow", "random_gemvs", "refused"]),
]


#: Cases run under Icarus only: the 16-lane case, whose cold Verilator build and run take longer
#: than Icarus's run (docs/verification.md); the small preset's cases check the same RTL, at
#: other widths, under Verilator. The compute-bound, transfer-bound and 16-lane variants (35,
#: 45 and 86 s of a cold make test) run only with --slow, their cycles and results checked in
#: make test by Amaranth's simulator (tests/test_inflash_hdl.py: test_pe_other_widths at F = 1,
#: 16 and 8, test_attention_timing at F = 1 and tR 20 cycles, at one-byte transfers, at F = 16).
#: Each preset runs in make test under the simulator whose cold build and run cost less CPU
#: (docs/verification.md): the PE under Verilator (85 s against Icarus's 98 s), the unit under
#: Icarus (70 s against 96 s); the other with --slow, the same testcases on the same RTL.
RUNS = case_runs(CASES, icarus_only={case_id(*CASES[3])},
                 verilator_slow={case_id(*CASES[4])},
                 icarus_slow={case_id(*CASES[0])},
                 slow={case_id(*c) for c in CASES[1:4]})


# With --slow: covered in make test by the generic Verilog's run (test_inflash) and, at a smaller
# size, by the ECP5 cases of the units whose multipliers it instantiates (test_arith_*_ecp5);
# 26 s of a cold make test.
@pytest.mark.slow
def test_inflash_ecp5():
    """The PE's Verilog for the ECP5 (the set-up's multiplier pieces on MULT18X18D blocks with
    their own registers, cocotb_tests/models/MULT18X18D.v): bit-exact, the same page reads and
    refusals as the generic Verilog, whose cycles it keeps."""
    run_block("inflash", registry.get("inflash").parameters("small"), "icarus",
              testcase=["random_gemvs", "refused", "random_attention", "attention_refusals"],
              target="ecp5")


@pytest.mark.parametrize("case, simulator", RUNS)
def test_inflash(case, simulator):
    run_case(case, simulator)
