"""Run the floating-point testbenches under Icarus and Verilator for several parameter sets."""

import pytest

from .launcher import case_id, case_runs, run_case

#: (block, preset, overrides). Every block at one parameter set under both simulators, the other
#: sets (formats, depths) under Icarus only and with --slow (make test-all): every stage count,
#: format pair and lane count is simulated in-process in make test (tests/test_arith_float_hdl.py),
#: and each block's first set here runs its testbench on its Verilog.
CASES = [
    ("arith-fpmul", "default", {}),
    ("arith-fpmul", "paper", {"stages": "1"}),
    ("arith-fpmul", "small", {"a_fmt": "fp16", "b_fmt": "fp16", "out_fmt": "fp16"}),
    ("arith-fpadd", "default", {}),
    ("arith-fpadd", "small", {"stages": "7"}),
    ("arith-fpadd", "small", {"fmt": "fp16", "stages": "1"}),
    ("arith-fpmac", "default", {}),
    ("arith-fpconv", "default", {}),
    ("arith-fpconv", "paper", {"stages": "1"}),
    ("arith-int2fp", "default", {}),
    ("arith-int2fp", "small", {}),
    ("arith-fdot", "small", {}),
    ("arith-fdot", "small", {"in_fmt": "fp16", "lanes": "4", "add_stages": "2"}),
]
#: Each block's first case runs under both simulators, its others under Icarus only. Under
#: Verilator with --slow (make test-all): a cold C++ build of 8 to 13 s each in make test, and
#: its Icarus run there is the same testbench on the same Verilog (launcher.case_runs).
BOTH = {case_id(*next(c for c in CASES if c[0] == block)) for block, *_ in CASES}
OTHERS = {case_id(*c) for c in CASES} - BOTH
RUNS = case_runs(CASES, icarus_only=OTHERS, verilator_slow=BOTH, slow=OTHERS)
#: The same testbenches on the Verilog written for the ECP5 with ``block_registers``, where the
#: multipliers' pieces are MULT18X18D blocks with their own registers (hdl/arith/dsp.py),
#: simulated by cocotb_tests/models/MULT18X18D.v: fp32 x fp32 (four blocks), bf16 x bf16 (one),
#: a dot product; fp32 x fp32 under Verilator with --slow, as above.
BLOCKS = {"block_registers": "true"}
ECP5_CASES = [
    ("arith-fpmul", "default", BLOCKS),
    ("arith-fpmul", "paper", BLOCKS),
    ("arith-fdot", "small", BLOCKS),
]
#: bf16 x bf16 (one block) runs with --slow: fp32 x fp32 places the same pieces on four blocks,
#: and the bf16 dot product's lanes each on one, in make test.
ECP5_RUNS = case_runs(ECP5_CASES, icarus_only={case_id(*c) for c in ECP5_CASES[1:]},
                      verilator_slow={case_id(*ECP5_CASES[0])},
                      slow={case_id(*ECP5_CASES[1])}, tag="-ecp5")


@pytest.mark.parametrize("case, simulator", RUNS)
def test_arith_float(case, simulator):
    run_case(case, simulator)


@pytest.mark.parametrize("case, simulator", ECP5_RUNS)
def test_arith_float_ecp5(case, simulator):
    run_case(case, simulator, target="ecp5")
