"""Run the UMDAM testbenches under Icarus and Verilator for several parameter sets."""

import pytest

from memwall import registry

from .launcher import case_id, case_runs, run_block, run_case

#: (block, preset, overrides): the small geometry exhaustively (also with ranks and bank groups),
#: LPDDR5 at the default and paper presets, hashed mappings. The combinational (latency 0) variant has no clock port; it is
#: checked by Amaranth's simulator and the formal proof in tests/test_umdam_hdl.py.
CASES = [
    ("umdam", "small", {}),
    ("umdam", "small", {"mappings": "row-colM-bank^row-rank-channel^row-colL-offset,umdam"}),
    ("umdam", "paper", {}),
    ("umdam", "small", {"ranks": "2", "bankgroups": "2", "banks": "2",
                        "mappings": "umdam,row-colM-bankgroup^row-bank-rank^row-channel-colL-offset"}),
    ("umdam-composer", "small", {}),
    ("umdam-composer", "paper", {"mappings": "umdam,row-colM-bank^row-rank-channel^row-colL-offset,ianus"}),
    ("umdam-tilegen", "small", {}),
    ("umdam-tilegen", "small", {"elem_bytes": "4", "mapping": "ianus", "max_rows": "37", "max_cols": "21"}),
    ("umdam-tilegen", "small", {"ranks": "2", "bankgroups": "2", "banks": "2"}),
    ("umdam-tilegen", "default", {}),
]


#: Under Verilator every case runs with --slow (make test-all): each is a cold C++ build of 12 to
#: 16 s for a run of a few seconds, and its Icarus run, in make test, is the same testbench on the
#: same Verilog (launcher.case_runs).
#: The tile generator's default preset (the LPDDR5 geometry, 22 s under Icarus) runs only with
#: --slow: its small preset and the three variants above check the same RTL at smaller sizes.
#: Also only with --slow: the hashed mappings without ranks (the variant with ranks and bank
#: groups runs hashed mappings in make test), the tile generator with ranks and bank groups
#: (its mapper is umdam's, run with them in make test; the tile walk is tilegen-small's), and
#: the paper presets of the mapper and the composer (the small presets run umdam, robaracoch and
#: ianus at narrower widths; a hashed mapping runs in the mapper's variant with ranks).
RUNS = case_runs(CASES, verilator_slow={case_id(*c) for c in CASES},
                 slow={case_id("umdam-tilegen", "default", {}), case_id(*CASES[1]),
                       case_id(*CASES[2]), case_id(*CASES[5]), case_id(*CASES[8])})


@pytest.mark.parametrize("case, simulator", RUNS)
def test_umdam(case, simulator):
    run_case(case, simulator)


@pytest.mark.parametrize("variable", ["MEMWALL_WAVES", "WAVES"])
def test_waves_on_request_and_the_seed_to_rerun_with(monkeypatch, variable):
    """The launcher's switches: a seed from MEMWALL_SEED is the one cocotb runs with, and
    waveforms are written where waves_file says (Icarus: FST, through memwall's dump module)."""
    from .launcher import _seed, waves_file

    monkeypatch.setenv("MEMWALL_SEED", "1234")
    monkeypatch.setenv(variable, "1")
    block = registry.get("umdam")
    results = run_block("umdam", block.parameters("small"), "icarus", testcase="random_traffic")
    assert _seed(results) == "1234"
    waves = waves_file(results.parent, block.top, "icarus")
    assert waves.read_bytes()[:1] == b"\x00" and waves.stat().st_size > 1000   # FST header block
