"""Real SmolLM2 data through the rDXE tile's Verilog (issue 41): the ``rdxe`` back-end's fused
RMSNorm-GEMV of a layer's input and the Q.K^T and softmax-P.V of one KV group's three query heads
over the real INT8 KV cache, on ``rdxe-dxt`` under Icarus and Verilator; every output equals the
back-end's codes and the RTL cycles equal the cycle model's (cocotb_tests/realdata/rdxe.py has
the runs)."""

from __future__ import annotations

import pytest

from cocotb_tests.realdata import check_case
from sim.llm.cases import case
from sim.llm.score import model_file

from .launcher import SIMULATORS, simulator_runs

#: make test: layer 1 at position 4 (5 tokens in the cache: each token's key and value costs an
#: identity GEMV of 256 cycles on the preset), the first 8 outputs of attn_norm (attn_q rows 0-7,
#: two passes of the 4 VACs) and KV group 0's Q.K^T and P.V.
#: At full rate only (no stalled pass, cocotb_tests/realdata): the --slow cases repeat their ops
#: under idle cycles and back-pressure, which the block's random cases check in make test.
SMALL = {"layer": 1, "position": 4, "kinds": ["attn_norm", "attention"], "rows": 8,
         "groups": [0]}
#: --slow: the issue's case at position 64 (65 tokens): the whole attn_norm (960 x 576, 35 WMEM
#: loads) and KV group 0's three heads.
FULL = {"layer": 1, "position": 64, "kinds": ["attn_norm", "attention"], "groups": [0]}
#: --slow: real data at the PPU's clamp: layer 0's attn_output at position 1 gives 5 of its 576
#: INT8 codes at -127 or 127 (outputs 36, 96, 111, 439, 449; the static PPU table's headroom of 2
#: over the calibration text is exceeded); its first 112 outputs (4 WMEM loads) hold three.
CLAMP = {"layer": 0, "position": 1, "kinds": ["attn_output"], "rows": 112}


#: Verilator with --slow: the tile at d = 64 with three KV groups is a C++ build of its own (about
#: two minutes; no other make-test case has that size); the Icarus run checks the same Verilog in
#: make test.
@pytest.mark.parametrize("simulator", simulator_runs())
def test_realdata_rdxe_small(simulator):
    """Layer 1, position 4: 8 outputs of attn_norm, KV group 0's attention: bit-exact, RTL
    cycles == model cycles."""
    check_case("rdxe", SMALL, simulator, stalled=False)


#: The issue's size (252k cycles, 138k of them WMEM loads; about 6 minutes under Verilator);
#: test_realdata_rdxe_small runs the same runner on the same tile in make test.
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_realdata_rdxe_full(simulator):
    """Layer 1, position 64: attn_norm 960 x 576 and KV group 0's three heads over 65 tokens."""
    check_case("rdxe", FULL, simulator)


#: A few minutes under Icarus; the small case runs the same GEMV path in make test.
@pytest.mark.slow
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_realdata_rdxe_clamp(simulator):
    """Layer 0, position 1: attn_output's outputs at the clamp come out of the RTL clamped the
    same way (three of the first 112 outputs are +-127)."""
    ops, _ = case(model_file(None), "rdxe", **CLAMP)
    assert [int(v) for v in ops[0].expected["y"][[36, 96, 111]]] == [-127, -127, 127]
    check_case("rdxe", CLAMP, simulator)
