"""Run blocks generated with ``--interface axis`` through their own testbenches and golden models,
driven by cocotbext-axi (cocotb_tests/axis.py), under Icarus and Verilator.

Measured (2 cores, loaded, fresh builds): 115 s in make test; the two --slow cases 218 s each
(before every Verilator case went to --slow: 42 s of the suite's time in make test since).
Each case runs the block's random-traffic test (idle cycles on every input, back-pressure on
every output with ``tready``) on the wrapped design; the native runs (test_<family>.py) cover the
rest of each testbench, and the wrapper is wiring only.
"""

import pytest

from memwall import registry

from .launcher import case_id, case_runs, run_block, run_case

#: (block, preset, overrides, cocotb tests of the block's own testbench).
CASES = [
    ("umdam", "small", {}, ["random_traffic"]),
    ("arith-fpmul", "default", {}, ["corners_and_random"]),
    ("flowkv", "small", {}, ["random_jobs"]),
    ("inflash", "small", {}, ["random_gemvs"]),
    ("flowkv-dqp", "small", {}, ["random_jobs"]),
]
#: Under Verilator every case runs with --slow (make test-all): a cold C++ build of 10 s (umdam,
#: fpmul) to a minute or more (flowkv, inflash) each; their Icarus runs check the same wrapped
#: RTL in make test (launcher.case_runs).
#: The in-flash PE's wrapped run (24 s under Icarus) runs only with --slow: the wrapper's code is
#: the same for every block (memwall/axis.py) and flowkv's run, in make test, takes it through
#: several input streams and an output stream at a smaller cost (13 s).
#: FlowKV's pair (13 s) also runs only with --slow: FusedDQP's wrapped run, in make test, takes
#: the wrapper through several input streams and two output streams.
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES},
                 slow={"inflash-small", "flowkv-small"})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_axis(case, simulator):
    run_case(case, simulator, interface="axis")


def test_axis_transport_catches_wrong_results():
    """A swapped field and a flipped bit in the expectation are caught (cocotb_tests/axis_tb.py)."""
    run_block("umdam", registry.get("umdam").parameters("small"), "icarus", interface="axis",
              module="cocotb_tests.axis_tb")
