"""Run blocks generated with ``--interface axis`` through their own testbenches and golden models,
driven by cocotbext-axi (cocotb_tests/axis.py), under Icarus and Verilator.

Measured (2 cores, loaded, fresh builds): 115 s in make test; the two --slow cases 218 s each.
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
]
#: flowkv and inflash under Verilator run with --slow (make test-all): a C++ build of a minute or
#: more each; their Icarus runs check the same wrapped RTL in make test, and test_flowkv.py and
#: test_inflash.py run the blocks themselves under Verilator.
RUNS = case_runs(CASES, verilator_slow={"flowkv-small", "inflash-small"})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_axis(case, simulator):
    run_case(case, simulator, interface="axis")


def test_axis_transport_catches_wrong_results():
    """A swapped field and a flipped bit in the expectation are caught (cocotb_tests/axis_tb.py)."""
    run_block("umdam", registry.get("umdam").parameters("small"), "icarus", interface="axis",
              module="cocotb_tests.axis_tb")
