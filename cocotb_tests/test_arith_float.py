"""Run the floating-point testbenches under Icarus and Verilator for several parameter sets."""

import pytest

from .launcher import SIMULATORS, case_id, run_case

#: (block, preset, overrides, simulators). A Verilator compile costs ~10 s, so every block runs
#: under both simulators at one parameter set and the other sets (formats, depths) under Icarus
#: only; every stage count and format pair is also simulated in-process
#: (tests/test_arith_float_hdl.py). Whole file: about 1.5 minutes on one core.
BOTH, ICARUS = SIMULATORS, ("icarus",)
CASES = [
    ("arith-fpmul", "default", {}, BOTH),
    ("arith-fpmul", "paper", {"stages": "1"}, ICARUS),
    ("arith-fpmul", "small", {"a_fmt": "fp16", "b_fmt": "fp16", "out_fmt": "fp16"}, ICARUS),
    ("arith-fpadd", "default", {}, BOTH),
    ("arith-fpadd", "small", {"stages": "7"}, ICARUS),
    ("arith-fpadd", "small", {"fmt": "fp16", "stages": "1"}, ICARUS),
    ("arith-fpmac", "default", {}, BOTH),
    ("arith-fpconv", "default", {}, BOTH),
    ("arith-fpconv", "paper", {"stages": "1"}, ICARUS),
    ("arith-int2fp", "default", {}, BOTH),
    ("arith-int2fp", "small", {}, ICARUS),
    ("arith-fdot", "small", {}, BOTH),
    ("arith-fdot", "small", {"in_fmt": "fp16", "lanes": "4", "add_stages": "2"}, ICARUS),
]
RUNS = [(case[:3], simulator) for case in CASES for simulator in case[3]]
#: The same testbenches on the Verilog written for the ECP5 with ``block_registers``, where the
#: multipliers' pieces are MULT18X18D blocks with their own registers (hdl/arith/dsp.py),
#: simulated by cocotb_tests/models/MULT18X18D.v: fp32 x fp32 (four blocks), bf16 x bf16 (one),
#: a dot product.
BLOCKS = {"block_registers": "true"}
ECP5_CASES = [
    ("arith-fpmul", "default", BLOCKS, BOTH),
    ("arith-fpmul", "paper", BLOCKS, ICARUS),
    ("arith-fdot", "small", BLOCKS, ICARUS),
]
ECP5_RUNS = [(case[:3], simulator) for case in ECP5_CASES for simulator in case[3]]


@pytest.mark.parametrize("case, simulator", RUNS, ids=[f"{case_id(*case)}-{sim}" for case, sim in RUNS])
def test_arith_float(case, simulator):
    run_case(case, simulator)


@pytest.mark.parametrize("case, simulator", ECP5_RUNS,
                         ids=[f"{case_id(*case)}-ecp5-{sim}" for case, sim in ECP5_RUNS])
def test_arith_float_ecp5(case, simulator):
    run_case(case, simulator, target="ecp5")
