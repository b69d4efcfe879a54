"""Run the UMDAM testbenches under Icarus and Verilator for several parameter sets."""

import pytest

from memwall import registry

from .launcher import SIMULATORS, case_id, run_block

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




@pytest.mark.parametrize("simulator", SIMULATORS)
@pytest.mark.parametrize("case", CASES, ids=[case_id(*c) for c in CASES])
def test_umdam(case, simulator):
    block, preset, overrides = case
    params = registry.get(block).parameters(preset, overrides)
    run_block(block, params, simulator)
